package naming

import "strings"

// PipelineGroup reports whether a communicator's or process group's name
// says it joins a pipeline's stages and nothing else: it holds "pipe", or
// "pp" as a word of its own ("pp", "mesh_pp", "pp_group"), in any case,
// and names no other parallel dimension — Megatron-LM's
// EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP spans tensor, expert and
// pipeline ranks, and a rank's place in it is not its stage.
func PipelineGroup(name string) bool {
	pipe, other := Dimensions(name)
	return pipe && !other
}

// Dimensions reports whether a communicator's or group's name speaks of a
// pipeline ("pipe", or "pp" as a word of its own), and whether it speaks
// of any other parallel dimension (tensor, expert, data, context,
// embedding, or the words tp, dp, ep, cp, fsdp), in any case.
func Dimensions(name string) (pipe, other bool) {
	l := strings.ToLower(name)
	pipe = strings.Contains(l, "pipe")
	for _, w := range strings.FieldsFunc(l, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }) {
		switch w {
		case "pp":
			pipe = true
		case "tp", "dp", "ep", "cp", "fsdp":
			other = true
		}
	}
	for _, o := range []string{"tensor", "expert", "data", "context", "embedding"} {
		if strings.Contains(l, o) {
			other = true
		}
	}
	return pipe, other
}
