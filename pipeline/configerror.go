package pipeline

import (
	"fmt"
	"strconv"
)

// ConfigError is the error Validate returns: one problem, about the Config
// fields it names. Error writes each field as Name=value; Explain lets a
// caller that sets the fields from elsewhere (a command line, a file) say
// the same problem in its own names.
type ConfigError struct {
	format string
	args   []any // fieldRef where the message names a field
	cause  error // another package's error behind this one; may be nil
}

// fieldRef is a field named in a ConfigError's message, with its value, or
// alone when value is nil.
type fieldRef struct {
	name  string
	value any
}

// field names a Config field and its value in a message; fieldName names
// it alone.
func field(name string, value any) fieldRef { return fieldRef{name, value} }
func fieldName(name string) fieldRef        { return fieldRef{name: name} }

// Fields are the Config fields the problem is about, in the order the
// message names them; the first is the one at fault.
func (e *ConfigError) Fields() []string {
	var fs []string
	for _, a := range e.args {
		if f, ok := a.(fieldRef); ok {
			fs = append(fs, f.name)
		}
	}
	return fs
}

// Explain says the problem, naming each Config field with name(field,
// value); value is nil where the message names the field alone ("lower
// Width or Layers").
func (e *ConfigError) Explain(name func(field string, value any) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if f, ok := a.(fieldRef); ok {
			a = name(f.name, f.value)
		}
		args[i] = a
	}
	return fmt.Sprintf(e.format, args...)
}

func (e *ConfigError) Error() string {
	return "pipeline: " + ErrInvalidConfig.Error() + ": " + e.Explain(fieldEqualsValue)
}

// Unwrap makes errors.Is find ErrInvalidConfig and the cause.
func (e *ConfigError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalidConfig}
	}
	return []error{ErrInvalidConfig, e.cause}
}

// fieldEqualsValue is how Error names a field: Width=128, Schedule="1f1b".
func fieldEqualsValue(name string, value any) string {
	switch v := value.(type) {
	case nil:
		return name
	case string:
		return name + "=" + strconv.Quote(v)
	}
	return fmt.Sprintf("%s=%v", name, value)
}

// invalid returns a *ConfigError; format's %s verbs take the fieldRef
// arguments.
func invalid(format string, args ...any) *ConfigError {
	return &ConfigError{format: format, args: args}
}
