package model

import (
	"encoding/json"
	"math"
	"strconv"
)

// ConfigKey maps a config.json key to the GGUF metadata key (after
// "<arch>.") that holds the same value. The tables are read in both
// directions: the GGUF reader (ggufKeys) looks keys up by their Hugging
// Face name, reads the GGUF key and records the value under the Hugging
// Face name in Config.Raw, as it gives tensors their Hugging Face names;
// lem quant's writer (GGUFLayout) writes each value under the GGUF key of
// its Hugging Face name. Values that are not a plain rename (a product of
// two keys, a per-layer list, a transformed scale) are written and read by
// the family's code under their GGUF names.
type ConfigKey struct {
	HF   string // config.json key
	GGUF string // metadata key after "<arch>."
}

// sharedKeys are the keys most families store alike. A family's own Keys
// come first when both name a Hugging Face key.
var sharedKeys = []ConfigKey{
	{"max_position_embeddings", "context_length"},
	{"hidden_size", "embedding_length"},
	{"num_hidden_layers", "block_count"},
	{"intermediate_size", "feed_forward_length"},
	{"num_attention_heads", "attention.head_count"},
	{"num_key_value_heads", "attention.head_count_kv"},
	{"head_dim", "attention.key_length"},
	{"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
	{"vocab_size", "vocab_size"},
	{"rope_theta", "rope.freq_base"},
	{"final_logit_softcapping", "final_logit_softcapping"},
	{"attn_logit_softcapping", "attn_logit_softcapping"},
	{"sliding_window", "attention.sliding_window"},
	{"num_experts", "expert_count"},
	{"num_experts_per_tok", "expert_used_count"},
}

// keyNames returns a GGUF architecture's table: Hugging Face key → GGUF
// key (without the "<arch>." prefix).
func keyNames(arch string) map[string]string {
	m := map[string]string{}
	for _, k := range sharedKeys {
		m[k.HF] = k.GGUF
	}
	for _, a := range archByType {
		if a.GGUF != arch {
			continue
		}
		for _, k := range a.Keys {
			m[k.HF] = k.GGUF
		}
	}
	return m
}

// ggufKeyName resolves a name the GGUF code uses: a Hugging Face key of the
// table gives its GGUF key (and true); any other name is a GGUF key with no
// config.json counterpart and is returned as it is.
func ggufKeyName(names map[string]string, name string) (string, bool) {
	if g, ok := names[name]; ok {
		return g, true
	}
	return name, false
}

// rawNumber returns v as the JSON number config.json would hold.
func rawNumber(v float64) json.RawMessage {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return json.RawMessage(strconv.FormatInt(int64(v), 10))
	}
	return json.RawMessage(strconv.FormatFloat(v, 'g', -1, 64))
}
