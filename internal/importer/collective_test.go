package importer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trainscope/trainscope/profiler"
)

// TestShortenedGroupRanks: PyTorch shortens a "Process Group Ranks" list
// of more than 30 ranks to its first 29, "...", and its last. The last
// rank's place is the group's size less one, not its place in the text;
// the older form ("[r0, …, r29, ...]") lists no last rank.
func TestShortenedGroupRanks(t *testing.T) {
	// 64 ranks, the odd ones: rank 2i+1 is at place i.
	const shortened = `"[1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, ..., 127]"`
	const older = `"[1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, ...]"`
	for _, tc := range []struct {
		name            string
		rank            int
		args            string
		groupRank, peer int32
	}{
		{"the last rank", 127, `{"Collective name":"allreduce","Group size":64,"Process Group Ranks":` + shortened + `}`, 63, -1},
		{"a listed rank", 57, `{"Collective name":"allreduce","Group size":64,"Process Group Ranks":` + shortened + `}`, 28, -1},
		{"a send to the last rank", 57, `{"Collective name":"send","Dst Rank":127,"Group size":64,"Process Group Ranks":` + shortened + `}`, 28, 63},
		{"a receive from the last rank", 1, `{"Collective name":"recv","Src Rank":127,"Group size":64,"Process Group Ranks":` + shortened + `}`, 0, 63},
		{"the older form", 59, `{"Collective name":"allreduce","Group size":64,"Process Group Ranks":` + older + `}`, 29, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := kEvent{name: "ncclDevKernel_AllReduce_Sum_f32_RING_LL", meta: &kinetoArgs{}}
			if err := json.Unmarshal([]byte(tc.args), d.meta); err != nil {
				t.Fatal(err)
			}
			c, ok := collectiveOf(&d, tc.rank, map[string]bool{})
			if !ok || c.GroupSize != 64 || c.GroupRank != tc.groupRank || c.Peer != tc.peer {
				t.Errorf("group size %d, group rank %d, peer %d; want 64, %d, %d", c.GroupSize, c.GroupRank, c.Peer, tc.groupRank, tc.peer)
			}
		})
	}
}

// TestGroupRankOfUnnamedRanks: two traces without distributedInfo get
// their ranks from AssignRanks (0 and 1, in the order given); each
// collective's place in its group ("Process Group Ranks" [0, 1]) is that
// rank's, so the second file's all-reduce and receive are group rank 1,
// and its receive pairs with the first file's send (rank 0 → 1).
func TestGroupRankOfUnnamedRanks(t *testing.T) {
	const a = `[
{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,"ts":10,"dur":5,"args":{"Collective name":"allreduce","In msg nelems":4,"Out msg nelems":4,"dtype":"Float","Group size":2,"Process Group Name":"0","Process Group Ranks":"[0, 1]","Seq":1}},
{"ph":"X","cat":"kernel","name":"ncclDevKernel_SendRecv","pid":0,"tid":7,"ts":20,"dur":5,"args":{"Collective name":"send","In msg nelems":4,"Out msg nelems":4,"dtype":"Float","Group size":2,"Process Group Name":"0","Process Group Ranks":"[0, 1]","Dst Rank":1,"Seq":2}}]`
	b := strings.NewReplacer(`"send"`, `"recv"`, `"Dst Rank":1`, `"Src Rank":0`).Replace(a)
	pa, err := ParseKineto("a.json", strings.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := ParseKineto("b.json", strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	AssignRanks([]*Profile{pa, pb})
	for _, tc := range []struct {
		p         *Profile
		rank      int
		op        string
		groupRank int32
		peer      int32
	}{
		{pa, 0, "AllReduce", 0, -1}, {pa, 0, "Send", 0, 1},
		{pb, 1, "AllReduce", 1, -1}, {pb, 1, "Recv", 1, 0},
	} {
		var rec *profiler.Record
		for i := range tc.p.Records {
			if tc.p.Records[i].Collective.Op == tc.op {
				rec = &tc.p.Records[i]
			}
		}
		if rec == nil {
			t.Fatalf("%s: no %s in %+v", tc.p.Path, tc.op, tc.p.Records)
		}
		if rec.Rank != tc.rank || rec.Collective.GroupRank != tc.groupRank || rec.Collective.Peer != tc.peer {
			t.Errorf("%s's %s: rank %d, group rank %d, peer %d; want %d, %d, %d", tc.p.Path, tc.op,
				rec.Rank, rec.Collective.GroupRank, rec.Collective.Peer, tc.rank, tc.groupRank, tc.peer)
		}
	}
}
