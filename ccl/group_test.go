package ccl

import (
	"errors"
	"testing"

	"github.com/trainscope/trainscope/runtime"
)

func TestGroup(t *testing.T) {
	errEnd := errors.New("end failed")
	for _, tc := range []struct {
		name         string
		fn           func() error
		startErr     error
		endErr       error
		wantIs       []error
		starts, ends int
		called       bool
	}{
		{"ok", func() error { return nil }, nil, nil, nil, 1, 1, true},
		{"fn fails", func() error { return errFn }, nil, nil, []error{errFn}, 1, 1, true},
		{"end fails", func() error { return nil }, nil, errEnd, []error{errEnd}, 1, 1, true},
		{"both fail", func() error { return errFn }, nil, errEnd, []error{errFn, errEnd}, 1, 1, true},
		{"start fails", func() error { return nil }, StatusInternal, nil, []error{StatusInternal}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeImpl{typ: runtime.CPU, startErr: tc.startErr, endErr: tc.endErr}
			called := false
			err := Group(f, func() error { called = true; return tc.fn() })
			if len(tc.wantIs) == 0 && err != nil {
				t.Fatalf("Group: %v", err)
			}
			for _, w := range tc.wantIs {
				if !errors.Is(err, w) {
					t.Errorf("Group error %v does not wrap %v", err, w)
				}
			}
			if s, e := f.counts(); s != tc.starts || e != tc.ends {
				t.Errorf("GroupStart×%d GroupEnd×%d, want %d and %d", s, e, tc.starts, tc.ends)
			}
			if called != tc.called {
				t.Errorf("fn called = %v", called)
			}
		})
	}
}

func TestGroupPanics(t *testing.T) {
	f := &fakeImpl{typ: runtime.CPU}
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the panic did not propagate")
			}
		}()
		_ = Group(f, func() error { panic("boom") })
	}()
	if s, e := f.counts(); s != 1 || e != 1 {
		t.Errorf("after a panic: GroupStart×%d GroupEnd×%d", s, e)
	}
	if err := Group(nil, nil); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("nil backend: %v", err)
	}
}

func TestGroupGuard(t *testing.T) {
	f := &fakeImpl{typ: runtime.CPU, endErr: StatusInternal}
	g, err := NewGroupGuard(f)
	if err != nil {
		t.Fatal(err)
	}
	if s, e := f.counts(); s != 1 || e != 0 {
		t.Fatalf("after NewGroupGuard: GroupStart×%d GroupEnd×%d", s, e)
	}
	if err := g.End(); !errors.Is(err, StatusInternal) {
		t.Errorf("first End: %v", err)
	}
	if err := g.End(); err != nil {
		t.Errorf("second End: %v", err)
	}
	if s, e := f.counts(); s != 1 || e != 1 {
		t.Errorf("after two Ends: GroupStart×%d GroupEnd×%d", s, e)
	}
	if _, err := NewGroupGuard(&fakeImpl{typ: runtime.CPU, startErr: StatusUnavailable}); !errors.Is(err, StatusUnavailable) {
		t.Errorf("failed GroupStart: %v", err)
	}
	if _, err := NewGroupGuard(nil); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("nil backend: %v", err)
	}
	var nilGuard *GroupGuard
	if err := nilGuard.End(); err != nil {
		t.Errorf("nil guard End: %v", err)
	}
}

func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		op   string
		n    int
		want float64
	}{
		{OpAllReduce, 1, 0}, {OpAllReduce, 2, 1}, {OpAllReduce, 4, 1.5}, {OpAllReduce, 8, 1.75},
		{OpAllGather, 1, 0}, {OpAllGather, 2, 0.5}, {OpAllGather, 4, 0.75}, {OpAllGather, 8, 0.875},
		{OpReduceScatter, 4, 0.75}, {OpReduceScatter, 1, 0},
		{OpBroadcast, 1, 1}, {OpBroadcast, 8, 1}, {OpReduce, 4, 1}, {OpSend, 2, 1}, {OpRecv, 2, 1},
		{OpAllToAll, 4, 0.75}, {OpAllToAll, 2, 0.5}, {OpAllToAll, 1, 0}, {OpAllReduce, 0, 0},
		// nccl-tests' gather and scatter: S the root's whole buffer, as
		// AllGather's; its sendrecv: 1.
		{OpGather, 4, 0.75}, {OpScatter, 8, 0.875}, {OpGather, 1, 0}, {OpSendRecv, 2, 1}, {"Barrier", 4, 0},
	} {
		if got := BusFactor(tc.op, tc.n); got != tc.want {
			t.Errorf("BusFactor(%s, %d) = %v, want %v", tc.op, tc.n, got, tc.want)
		}
	}
	for op, name := range map[string]string{OpAllReduce: "AllReduce", OpAllGather: "AllGather", OpReduceScatter: "ReduceScatter",
		OpBroadcast: "Broadcast", OpReduce: "Reduce", OpSend: "Send", OpRecv: "Recv", OpAllToAll: "AllToAll",
		OpGather: "Gather", OpScatter: "Scatter", OpSendRecv: "SendRecv"} {
		if op != name {
			t.Errorf("op constant %q, want %q", op, name)
		}
	}
}
