"""Real ROOT files for the caching-mode replay, and the read plans made from them.

Description layer: pure, starts no process. `uproot` (and numpy) may be imported here;
nothing that runs (proc, netns, services, orchestration) may be.

- `generate`: a deterministic CMS-like TTree written with uproot, cached by parameters.
- `check`: the file against its own header, record chain and basket keys (bounded work),
  before anything trusts its numbers.
- `layout`: a file's own basket metadata (seeks, sizes, entry ranges, clusters).
- `select`: which branches a job reads (IOExerciser-style percentage or a list).
- `plan`: the byte ranges each caching mode requests, as frozen data.
"""
