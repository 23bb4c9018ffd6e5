package importer

import (
	"encoding/json"
	"testing"
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
			d := kEvent{name: "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}
			if err := json.Unmarshal([]byte(tc.args), &d.args); err != nil {
				t.Fatal(err)
			}
			c, ok := collectiveOf(&d, tc.rank, map[string]bool{})
			if !ok || c.GroupSize != 64 || c.GroupRank != tc.groupRank || c.Peer != tc.peer {
				t.Errorf("group size %d, group rank %d, peer %d; want 64, %d, %d", c.GroupSize, c.GroupRank, c.Peer, tc.groupRank, tc.peer)
			}
		})
	}
}
