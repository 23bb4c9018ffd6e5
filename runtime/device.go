package runtime

import (
	"strconv"
	"strings"
)

// DeviceType names a kind of device, and so a backend.
type DeviceType int

// Device types known to trainscope.
const (
	CPU DeviceType = iota
	CUDA
)

var deviceTypeNames = [...]string{CPU: "cpu", CUDA: "cuda"}

// String returns the lower-case name used in flags and labels ("cpu",
// "cuda"); a value outside the list says so.
func (t DeviceType) String() string {
	if t >= 0 && int(t) < len(deviceTypeNames) {
		return deviceTypeNames[t]
	}
	return "unsupported device type " + strconv.Itoa(int(t))
}

// ParseDeviceType parses a device type name as String writes it.
func ParseDeviceType(s string) (DeviceType, error) {
	for i, n := range deviceTypeNames {
		if strings.EqualFold(s, n) {
			return DeviceType(i), nil
		}
	}
	return 0, Errorf("ParseDeviceType", StatusInvalidArgument, "unknown device type %q (known: %s)", s, strings.Join(deviceTypeNames[:], ", "))
}

// Device is one device of a type, by index.
type Device struct {
	Type  DeviceType
	Index int
}

// String writes the device as "cuda:1".
func (d Device) String() string { return d.Type.String() + ":" + strconv.Itoa(d.Index) }

// EventFlag selects event behaviour at creation; flags combine with |.
type EventFlag uint32

// Event flags, numbered as CUDA numbers them.
const (
	EventDefault       EventFlag = 0
	EventBlockingSync  EventFlag = 1
	EventDisableTiming EventFlag = 2
	EventInterprocess  EventFlag = 4
)

// DataType is the element type of a buffer, a GEMM or a collective.
type DataType int

// Data types.
const (
	Float32 DataType = iota
	Float64
	Float16
	BFloat16
	Int8
	Uint8
	Int32
	Int64
)

var dataTypeInfo = [...]struct {
	name string
	size int
}{
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Int8:     {"int8", 1},
	Uint8:    {"uint8", 1},
	Int32:    {"int32", 4},
	Int64:    {"int64", 8},
}

// String returns the type's name ("float32").
func (d DataType) String() string {
	if d >= 0 && int(d) < len(dataTypeInfo) {
		return dataTypeInfo[d].name
	}
	return "unsupported data type " + strconv.Itoa(int(d))
}

// Size is the size of one element in bytes, or 0 for an unlisted type.
func (d DataType) Size() int {
	if d >= 0 && int(d) < len(dataTypeInfo) {
		return dataTypeInfo[d].size
	}
	return 0
}

// MemcpyKind says where a copy's source and destination live.
type MemcpyKind int

// Copy directions.
const (
	HostToDevice MemcpyKind = iota
	DeviceToHost
	DeviceToDevice
)

func (k MemcpyKind) String() string {
	switch k {
	case HostToDevice:
		return "HostToDevice"
	case DeviceToHost:
		return "DeviceToHost"
	case DeviceToDevice:
		return "DeviceToDevice"
	}
	return "unsupported memcpy kind " + strconv.Itoa(int(k))
}
