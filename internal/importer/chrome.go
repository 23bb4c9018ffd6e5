package importer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// chromeScanner reads the Chrome trace-event JSON that both Kineto and
// trainscope's own exporter write: an object with "traceEvents" and other
// keys, or a bare array of events. It owns the decoder and the byte count,
// so every format reports malformed input the same way: the file, and the
// offset of the event or key being read.
type chromeScanner struct {
	path string
	cr   *countingReader
	dec  *json.Decoder
}

func newChromeScanner(path string, r io.Reader) *chromeScanner {
	cr := &countingReader{r: r}
	dec := json.NewDecoder(cr)
	dec.UseNumber()
	return &chromeScanner{path: path, cr: cr, dec: dec}
}

// fail makes err a *ParseError at off, where the value being read starts
// (an event, a key). json.Decoder's SyntaxError.Offset does not count the
// tokens read before the value, so it is not used; UnmarshalTypeError's
// Offset is relative to the value.
func (s *chromeScanner) fail(off int64, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
	case errors.As(err, &te):
		if field := strings.TrimPrefix(te.Field, "."); field != "" {
			off += te.Offset // near the field's value
			err = fmt.Errorf("%s: want %s, found %s", field, jsonKind(te.Type), te.Value)
		} else {
			err = fmt.Errorf("want %s, found %s", jsonKind(te.Type), te.Value) // the value at off
		}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		off = s.cr.n
		err = errors.New("unexpected end of input (truncated?)")
	}
	return &ParseError{Path: s.path, Offset: off, Err: err}
}

// scan reads the whole trace. event is called for each element of
// traceEvents with the decoder positioned at it, its byte offset and its
// index; it must decode exactly one value. key is called for every other
// top-level key of the object form, likewise. Errors event and key return
// are returned as they are (they make their own *ParseError with fail).
func (s *chromeScanner) scan(event func(off int64, n int) error, key func(off int64, key string) error) error {
	dec := s.dec
	sawEvents := false
	readEvents := func(opened bool) error {
		if !opened {
			if err := expectDelim(dec, '['); err != nil {
				return s.fail(dec.InputOffset(), fmt.Errorf("traceEvents: %w", err))
			}
		}
		for n := 0; dec.More(); n++ {
			if err := event(dec.InputOffset(), n); err != nil {
				return err
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return s.fail(dec.InputOffset(), err)
		}
		sawEvents = true
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return s.fail(0, err)
	}
	switch tok {
	case json.Delim('['):
		// A bare array of events (the JSON Array Format).
		if err := readEvents(true); err != nil {
			return err
		}
	case json.Delim('{'):
		for dec.More() {
			off := dec.InputOffset()
			kt, err := dec.Token()
			if err != nil {
				return s.fail(off, err)
			}
			k, _ := kt.(string)
			if k == "traceEvents" {
				if err := readEvents(false); err != nil {
					return err
				}
				continue
			}
			if err := key(off, k); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return s.fail(dec.InputOffset(), err)
		}
	default:
		return s.fail(0, errors.New("want a JSON object with traceEvents, or an array of events"))
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the trace")
		}
		return s.fail(dec.InputOffset(), err)
	}
	if !sawEvents {
		return s.fail(s.cr.n, errors.New("no traceEvents"))
	}
	return nil
}

// skip reads past one value.
func (s *chromeScanner) skip(off int64) error {
	var v json.RawMessage
	if err := s.dec.Decode(&v); err != nil {
		return s.fail(off, err)
	}
	return nil
}

// jsonKind names the JSON a Go type is decoded from, for messages: an
// event is an object, not an importer.kinetoEvent.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[json.Number]() {
		return "a number"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}
