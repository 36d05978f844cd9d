package cuda

import (
	"fmt"
	"github.com/lem-engine/lem/compute"
	"unsafe"
)

// Graph is a recorded sequence of operations (typically one decode step)
// that replays with a single driver call. It reads and writes the same
// tensors every time; inputs that change (token ids, positions) are
// uploaded to the same tensors before Launch.
type Graph struct {
	b           *Backend
	graph, exec uintptr
	launch      func(*owner) error
	kernels     int // kernel launches recorded
}

// streamCaptureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED.
const streamCaptureModeRelaxed = 2

// Capture records the operations fn issues into a CUDA graph instead of
// running them. fn must issue only device operations on tensors that
// outlive the graph: no Read, Upload or UploadInts, and it should not
// allocate (run it once uncaptured first so that scratch memory exists).
// The graph is then replayed with Launch.
func (b *Backend) Capture(fn func()) (compute.Graph, error) {
	if b.capturing {
		return nil, fmt.Errorf("cuda: nested graph capture")
	}
	if err := b.Synchronize(); err != nil {
		return nil, err
	}
	b.capturing, b.captureErr = true, nil
	func() {
		defer func() { b.capturing = false }()
		fn()
	}()
	ops := b.pending
	b.pending = make([]op, 0, 2*flushAt)
	if b.captureErr != nil {
		return nil, b.captureErr
	}
	g := &Graph{b: b}
	for i := range ops {
		if ops[i].fn != 0 {
			g.kernels++
		}
	}
	err := b.do(func(w *owner) error {
		if err := w.check("cuStreamBeginCapture", call(w.d.cuStreamBeginCapture, w.stream, streamCaptureModeRelaxed)); err != nil {
			return err
		}
		var first error
		for i := range ops {
			if first = w.exec(&ops[i]); first != nil {
				break
			}
		}
		var graph uintptr
		r := call(w.d.cuStreamEndCapture, w.stream, uintptr(unsafe.Pointer(&graph)))
		if first == nil {
			first = w.check("cuStreamEndCapture", r)
		}
		if first != nil {
			if graph != 0 {
				call(w.d.cuGraphDestroy, graph)
			}
			return first
		}
		var exec uintptr
		if err := w.check("cuGraphInstantiateWithFlags", call(w.d.cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(&exec)), graph, 0)); err != nil {
			call(w.d.cuGraphDestroy, graph)
			return err
		}
		g.graph, g.exec = graph, exec
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: graph capture: %w", err)
	}
	g.launch = func(w *owner) error {
		return w.check("cuGraphLaunch", call(w.d.cuGraphLaunch, g.exec, w.stream))
	}
	return g, nil
}

// Launch records a replay of the graph in stream order.
func (g *Graph) Launch() {
	if g.exec == 0 {
		return
	}
	g.b.enqueue(g.launch)
}

// Close releases the graph.
func (g *Graph) Close() error {
	if g.exec == 0 || g.b.closed {
		return nil
	}
	exec, graph := g.exec, g.graph
	g.exec, g.graph = 0, 0
	return g.b.do(func(w *owner) error {
		call(w.d.cuGraphExecDestroy, exec)
		call(w.d.cuGraphDestroy, graph)
		return nil
	})
}
