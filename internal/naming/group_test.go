package naming

import "testing"

func TestPipelineGroup(t *testing.T) {
	for name, want := range map[string]bool{
		"PIPELINE_MODEL_PARALLEL_GROUP":   true, // Megatron-LM's
		"PIPELINE_MODEL_PARALLEL_GROUP:3": true, // as PyTorch names it with the group's name
		"DATA_PARALLEL_GROUP:5":           false,
		"pp":                              true,
		"mesh_pp":                         true, // a device mesh's dimension
		"PP-group":                        true,
		"pipe":                            true,
		"DATA_PARALLEL_GROUP":             false,
		// Megatron-LM's groups that span pipeline ranks and others.
		"EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": false,
		"TENSOR_AND_PIPELINE_GROUP":                   false,
		"EMBEDDING_GROUP":                             false,
		"mesh_dp_pp":                                  false,
		"dp":                                          false,
		"app":                                         false,
		"ppo":                                         false,
		"pp3":                                         false,
		"default_pg":                                  false,
		"":                                            false,
	} {
		if got := PipelineGroup(name); got != want {
			t.Errorf("PipelineGroup(%q) = %v, want %v", name, got, want)
		}
	}
}
