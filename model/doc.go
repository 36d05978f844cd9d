// Package model describes model architectures: the typed view of a Hugging
// Face config.json (config.go), the shared blocks families are built from,
// and one file per architecture family, each registered once.
//
// # Layout
//
//   - arch.go: the registry. A family file calls Register(Arch{…}) in its
//     init function with its config.json model types, its Load function,
//     its GGUF architecture name, its tensor layout, its config keys and
//     its GGUF metadata hooks; a family with typed config fields also
//     calls registerParams with the reader (and check) of its parameter
//     struct, which Config embeds. Nothing outside the family file names
//     the family but that one embed line in Config.
//   - keys.go: the Hugging Face ⇄ GGUF config key table. sharedKeys holds
//     the keys most families share; a family lists its own in Arch.Keys.
//     The GGUF reader and lem quant's writer read the same table, in
//     opposite directions.
//   - gguf.go, gguf_rules.go: reading and writing GGUF files (tensor names
//     and shapes through TensorLayout, metadata through the key table and
//     Arch.Meta's hooks), and the tensor rules several families share.
//   - attention.go: the blocks. attention is the one softmax attention
//     block (q/k/v norms, output gate, key scale, biases, fused qkv, KV
//     sharing, and the window, sinks and soft cap of compute.Attention); it
//     issues its operations in one order, which the CUDA backend's decode
//     fusion relies on (fusion_test.go fails when a family loses fusion).
//     mlp is the gated feed-forward block. moe.go (mixture of experts),
//     deltanet.go (gated delta rule), lfm2.go's shortConv and mamba2.go's
//     ssmMixer are the other blocks. A block holds what it needs, set at
//     load (weights, the optional backend operations it calls, its norm
//     eps), and its forward takes the pass (pass.go), its output and its
//     input.
//   - pass.go and batch.go: a pass is one forward pass, over one
//     sequence's State (Forward) or over the rows of many sequences and a
//     Cache (ForwardBatch, Batched): the backend, the arena, the rows'
//     tokens and positions, and how attention reaches its keys and values
//     (a sequence's caches, or paged pools through compute.Pager) and
//     recurrent layers their state (each sequence's rows and tensors). A
//     family writes its stack once, as forward(p *pass), and its Forward
//     and ForwardBatch both call it. Row-wise work runs once over all rows;
//     recurrent layers run per sequence over views of its rows.
//   - kv.go and recurrent.go: per-sequence state, the KV caches and the
//     recurrent (convolution, SSM, delta-rule) state with its checkpoints;
//     arena.go: the activation buffers of a forward pass, owned by the
//     state, looked up by name. A family with recurrent layers keeps, next
//     to its Forward, a state type that embeds recurrentState and lists its
//     layers' recurrent tensors (mamba2State, lfm2State, falconH1State,
//     hybridState).
//   - The family files: llama.go, gemma.go, gemma3n.go, gemma4.go,
//     gptoss.go, qwen3moe.go, qwen3next.go, olmohybrid.go, lfm2.go,
//     mamba2.go and falconh1.go. dense.go is the stack the dense families
//     share. Otherwise a stack that several families share lives in the
//     file of the family it was written for: gemma4.go holds the KV-shared
//     attention, per-layer input embedding and output head that Gemma 3n
//     also uses; qwen3next.go the delta-rule hybrid stack and its state,
//     which OLMo Hybrid reuses with norms of its own.
//   - load.go, reads.go, stored.go, mlx.go, rope.go: opening a checkpoint,
//     reading tensors in their stored type, MLX packs, rotary embeddings.
//
// # Adding an architecture
//
// olmohybrid.go is a worked example: a family of gated delta-rule layers
// with full attention every fourth layer, added in one file.
//
//  1. Get a reference: a small checkpoint with logits and greedy ids from
//     the Hugging Face implementation, under ../shared/fixtures/archs/NAME
//     (its README says how they are made). The conformance tests in
//     package engine and package convert take a fixture from their tables.
//  2. Write NAME.go. Its doc comment states the model card's math. Its
//     Load function reads the family's own config keys (cfg.Get, or,
//     where several files need them, a parameter struct that NAME.go
//     defines and reads through registerParams, embedded in Config),
//     checks that the backend has the operations it needs, and builds the
//     layers from the blocks: newAttention + attention.load, loadMLP, the
//     MoE spec, a deltaNet. forward(p *pass) is the residual stream: the
//     family's norms and adds around block.forward calls, with buffers
//     from the pass's arena (p.ar), ending in the output head over the
//     rows p.out picks. Forward wraps it in onePass, ForwardBatch in
//     Cache.batchPass. NewState comes from the state type the family
//     needs (kvState, or recurrentState for layers that carry a recurrent
//     state); a stack value (the attention blocks and the shapes of the
//     recurrent tensors, whose index each recurrent block records) gives
//     KVLayout and NewCache.
//  3. Register it in init: Register(Arch{ModelTypes, Load, GGUF, Tensors,
//     Keys, Meta}). Tensors maps checkpoint tensor names to GGUF names and
//     shapes (a layer table and the shared rules); Keys lists the config
//     keys sharedKeys lacks; Meta's read and write hooks hold whatever is
//     not a renamed key. A family that llama.cpp does not know gets a GGUF
//     architecture name of its own, and lem quant's files read back the
//     same.
//  4. Add a lem synth geometry (synth/like.go) of a published size, so that
//     lem bench can measure it at scale.
//  5. Add the fixture to the test tables that name families (engine's
//     conformance and recurrent tables, convert's modernFamilies, this
//     package's decodeFusion and TestGGUFConfigKeys), and check with
//     scripts/bitcheck.go that no other family's bits moved.
//
// A new tensor operation is the one thing a family file cannot add: it goes
// in package compute with a CPU and a CUDA implementation and their tests
// (olmo_hybrid needed one option, compute.DeltaRule.NegEigval).
package model
