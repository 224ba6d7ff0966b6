"""Benchmark crux against hand-written JAX + optax training loops, and check the targets of docs/BENCHMARK.md.

    crux-bench                                         # every problem (about 10 min on 2 CPU cores)
    crux-bench --quick                                 # smoke run, under a minute
    crux-bench --problems standard,small --out bench-out --mlflow
    crux-bench --jno jno.json                          # merge the column of scripts/bench_jno.sh
    crux-bench --readme                                # README.md's speed table from this commit (~10 min)
    crux-bench --readme-from tpu/bench.json            # ... from a run elsewhere, in its device's column
    crux-bench --problems throughput --sizes 16384,65536 --widths 64,512 --peak-tflops 197
    crux-bench anatomy --quick --profile --out DIR     # where a fused update's time goes (anatomy.md)
    crux-bench calls                                   # what a fused call costs beyond its updates
    crux-bench compile                                 # a first solve()'s compile per memory option
    crux-bench fused --out DIR                         # crux and jNO at K = 1, 10, 100, 1000 (the jno extra)
    crux-bench command crux-sweep accumulation solver.epochs=10   # a sweep command's time outside its training

(``python -m cruxlab.bench`` is the same command.) Reference problems: -u'' = pi^2 sin(pi x) on [0, 1] with
u = x(1-x) N(x), N a tanh MLP, Adam 1e-3.

- ``standard``: 1024 uniform points, N = 1-64-64-64-1, full batch;
- ``small``: 64 points, N = 1-32-32-32-1 (dispatch-bound);
- ``accumulation``: the standard problem with batches of 8, of 32, and 4 micro-batches of 8;
- ``laplacian``: the 2-D analogue -Δu = 2 pi^2 sin(pi x) sin(pi y), u = x(1-x)y(1-y) N(x, y) on 1024
  points, to rank the Laplacian formulations where there is more than one direction;
- ``scaling``: the standard problem from 1k to 64k points and from width 32 to 256;
- ``fusing``: Burgers' equation on (x, t) (u_t, u_x, u_xx), updates of 4 micro-batches of 8: crux's time per
  update at K = 1, 10, 100, 1000 updates a call, each against K = 1's;
- ``throughput``: full batch, fused ×100, at ``--sizes`` and ``--widths``, at each of ``--precisions``: crux beside
  the hand-written scan, FLOP/s (XLA's count of an update over its time) and the fraction of ``--peak-tflops``;
- ``shapes``: the 2-D problem in shapes users train, few points on a narrow network (256 points, 2 × 32) and many
  on a wide one (16,384 points, 4 × 128; 4,096 on a CPU), at each of ``--precisions``: crux fused ×100 and ×1000
  against the fastest hand-written scan of as many updates (plain, and unrolled four to a turn), back to back.

The standard problem's table also gives the time to a first update (:mod:`cruxlab.bench.first_update`). The
standard and small problems are also fused at K = epochs (one call a round). crux and the hand-written code run at
the same matmul precision (``--precision``; crux's solve() defaults to full float32, hand-written JAX to the
device's fastest); ``--loop-forms`` also times both with their fused loop unrolled or guarded otherwise.

The modules, one concept each: the hand-written code (``hand_written``), the problems as crux trains them
(``reference_problems``), the forms of a fused loop (``loop_forms``), the ways to train that are timed
(``variants``), how they are timed (``interleaved``), XLA's count of their work (``flop_count``), the time to a
first update (``first_update``), one module per problem (``standard``, ``micro_batches``, ``laplacian_2d``,
``scaling``, ``fusing``, ``throughput``, ``shapes``), jNO's figures (``jno_problems``, timed in a process of its
own, and ``jno_column``), the targets (``targets``), bench.md (``tables``), README.md's speed table
(``speed_table``), what the run ran on (``host``), the MLflow run (``mlflow_run``) and the command
(``command_line``); the measurements beside the tables, each a subcommand: ``anatomy``, ``call_cost`` (``calls``),
``compile_cost`` (``compile``) and ``against_jno_fused`` (``fused``), each timed in :func:`interleaved.in_rounds`,
and ``command_time`` (``command``), a sweep command's time outside its jobs' training, from its store.
"""
