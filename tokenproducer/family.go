package tokenproducer

import "strings"

// FamilyForModel guesses the image formula from a served model name, e.g.
// "Qwen/Qwen3-VL-32B-Instruct" → qwen3-vl. Unknown names get the llm-d
// compatible estimate.
func FamilyForModel(model string) Family {
	m := strings.ToLower(model)
	m = strings.NewReplacer("_", "-", " ", "-").Replace(m)
	switch {
	case strings.Contains(m, "qwen3-vl"), strings.Contains(m, "qwen3vl"):
		return FamilyQwen3VL
	case strings.Contains(m, "qwen2.5-vl"), strings.Contains(m, "qwen2-5-vl"), strings.Contains(m, "qwen2.5vl"):
		return FamilyQwen25VL
	case strings.Contains(m, "qwen2-vl"), strings.Contains(m, "qwen2vl"):
		return FamilyQwen2VL
	case strings.Contains(m, "llava-next"), strings.Contains(m, "llava-v1.6"), strings.Contains(m, "llava-1.6"):
		return FamilyLLaVANeXT
	case strings.Contains(m, "llava"):
		return FamilyLLaVA15
	}
	return FamilyEstimate
}
