// Package graph keeps graphs in a bam store as compressed sparse rows and
// runs breadth-first search and connected components over them with the
// edges on storage.
//
// A graph called NAME is up to four arrays of the store: NAME.offsets
// (uint64, one more than the vertices; the neighbours of v are edges
// [offsets[v], offsets[v+1])), NAME.edges (uint32 vertex ids when the
// graph has at most 2^32 vertices, uint64 otherwise), NAME.heads (the
// HeadsPerVertex neighbours of every vertex with the highest degrees,
// padded with its own id, packed: block b holds only the vertices of more
// than 2b neighbours; HeadsOf) and, optionally, NAME.weights (float32, one per edge). The
// offsets array's catalog metadata records the vertex and edge counts, the
// id width, whether the graph is directed and the heads per vertex, so a
// graph is self-describing. Graphs saved before the heads array existed
// load without it, and CC reads their first neighbours from the edges.
//
// The package owns: building CSR from edge lists (parallel counting sort,
// optional symmetrisation, self-loop and duplicate removal), the
// generators (Kronecker with the Graph500/GAP parameters, uniform random),
// the importers (SNAP text edge lists, Matrix Market coordinate files,
// EMOGI/BaM .bel binary CSR, raw binary edge lists), the algorithms on the
// CPU engine (reading neighbour lists through array.Array) and on the GPU
// engine (kernels/graph.cu, edges through bam::array), the in-memory
// baselines of benchmark G1, and the validators (BFS depths edge by edge,
// components against a union-find).
//
// BFS is direction-optimizing on undirected graphs, on both engines and in
// the baselines (they share the kernels and the CPU code): levels whose
// frontier's lists hold many of the edges left run bottom-up, every
// unreached vertex reading its list only up to its first neighbour on the
// current level (direction has Beamer's rule). Directed graphs, whose lists
// hold out-neighbours only, always run top-down. On the GPU, where Beamer's
// rule turns to bottom-up, the heads are checked first and the kernel
// counts the lines the lists of the vertices left start in; the level goes
// on bottom-up only if those are fewer than the lines a top-down step
// would read (the rule counts edges, not lines: on storage a bottom-up
// step's short scans spread over most lines can cost more than the
// frontier's lists).
//
// How the GPU kernels share the work: a top-down level gives a warp to each
// frontier vertex, except that lists longer than 4096 edges (a Kronecker
// graph's hubs) are cut into segments of one line; the warps take the
// short lists and then the segments from a counter, so none sits idle
// while another still has work. Runs of small top-down levels (a few
// vertices a warp, no long list) go in one launch whose resident grid
// meets at a grid barrier between levels, so that a graph of thousands of
// levels (a mesh, a road network) does not pay the host's launches and
// counter reads at every level; a bottom-up
// level (and CC's first pass on a graph without heads) give a warp the
// vertices whose lists start in one cache line's worth of edges, so that a
// warp's reads share a line; on a bottom-up level each lane reads a short
// list within the line alone, and the warp reads the longer ones
// together. Graphs are saved with a heads array, every vertex's four
// neighbours of the highest degree in two blocks of two (HeadsPerVertex).
// CC's first pass reads the first block, at most 2N ids
// in order, where reading the first neighbours from the edges reads every
// line of them: on a scale-25 Kronecker graph 136 MB instead of 4.2 GB. On
// the GPU with edges on storage, that pass reads the heads through the
// cache in bulk into GPU memory, a piece at a time, expands a packed piece
// there (graph_heads_expand: the kernels read every vertex's heads at
// headsAt), and links from there, so no lane
// holds a cache line while it links. BFS's bottom-up levels check every
// unreached vertex's heads before its list (kept in GPU memory from the
// first bottom-up level on): on a Kronecker graph, whose hubs are most
// vertices' heads, the large bottom-up levels then read the heads instead
// of most lines of the edges. On the GPU the first such level reads the
// first block, probes with it, and reads and checks the second only if the
// level goes on bottom-up and the lines it would save (estimated by the
// probe, headsProbe.restSaves) outweigh its bytes; the CPU reads a chunk's
// second block only for a vertex its first did not settle. CC reads through longer lines than BFS
// (CCOptions: 16 KiB where the store allows), while BFS reads scattered
// lists. Saved edges start on a multiple of EdgeAlign (64 KiB), so that a
// GPU engine may cache them in lines of any size.
// A GPU BFS reads its depths back while its last levels run, once its
// frontier shrinks, and patches in the few vertices those levels reach
// (BFSResult.ReadBackLevel, LateDepths). BFSInto (and GPU.BFSInto) write
// the depths into a caller's buffer, so that repeated searches reuse one.
// GPU runs record where their time goes: BFSResult.Trace per level,
// CCResult.Trace per stage, each with the bytes read from storage, and
// BFSResult.ReadBack the time after the last level.
//
// # Invariants
//
//   - Offsets are non-decreasing, start at 0 and end at the edge count;
//     every edge names a vertex below the vertex count. Importers and Load
//     check this and fail with an error wrapping ErrFormat otherwise.
//   - Neighbour lists of built graphs are sorted ascending.
//   - Generators are deterministic in (kind, scale, edge factor, seed):
//     the result does not depend on the number of workers.
//   - Component labels are canonical: the smallest vertex id of the
//     component, so results of different engines compare bit for bit.
//
// The package must not reach below the store's public API for data-path
// I/O on the CPU engine; the GPU path binds the store's arrays to a
// gpuengine.Engine over the store's namespace files, and the baselines read
// the namespace files directly, as a program without bam would.
package graph
