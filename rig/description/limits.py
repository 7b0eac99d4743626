"""Every limit on what a scenario (and `rig net up`) may ask for, stated once.

The schema parsers (rig.description.schema), the scenario loader (rig.description.scenario), the path builder
(rig.realization.netns) and `rig net up` read these; a test checks the loader refuses what lies
outside. Pure constants: must not import anything.
"""
from __future__ import annotations

# --- the file itself ---------------------------------------------------------------
MAX_FILE_BYTES = 1 << 20          # a scenario or topology file; real ones are < 4 KiB
MAX_YAML_DEPTH = 32               # nesting of mappings/lists (the schema needs 4)
MAX_TEXT_CHARS = 4096             # description, binary paths, env values

# --- how much a scenario may contain ------------------------------------------------
MAX_PATHS = 32                    # 8 addresses per path in the run's /24 (rig.realization.netns)
MAX_RTTS = 64                     # RTTs swept per path
MAX_FILES = 64
MAX_SERVERS = 16
MAX_ORIGINS = 16                  # instances of one server (topology.MAX_COUNT nodes)
MAX_CPUS = 4096                   # CPUs per origin (sweep.server_cpus; the host's count caps it)
MAX_NAME_CHARS = 40               # a scenario name (path, client, server): schema.name
MAX_SOURCES = 64                  # metalink sources of one xrdcp extreme copy
MAX_CLIENTS = 64
MAX_BACKGROUND = 16              # competing flows of a scenario (`background:`)
MAX_ENV = 64                      # environment variables per client
MAX_SWEEP_VALUES = 32             # entries of sweep.concurrency / sweep.streams
MAX_REPEATS = 1000
MAX_CONCURRENCY = 256             # client processes started together
MAX_STREAMS = 128                 # streams of one multi-stream client
MAX_MEASUREMENTS = 100_000        # steps x transfer groups of the whole sweep

# --- numbers ------------------------------------------------------------------------
MIN_NONZERO_S = 1e-6              # a nonzero duration below 1 us is below tc's resolution
MAX_RTT_S = 10.0                  # above 10 s is not a network
MAX_DURATION_S = 86400.0          # any duration (timeouts), one day
MAX_IPERF_S = 3600.0              # iperf3 -t runs whole seconds, at most an hour here
MIN_PING_INTERVAL_S = 0.002       # below floods
MAX_PING_INTERVAL_S = 10.0
MIN_PING_COUNT, MAX_PING_COUNT = 3, 10000
MAX_RTT_TOLERANCE_S = 1.0
MAX_RTT_RECHECKS = 10
MIN_RATE_BPS = 1e3                # 1 kbit/s: tc's rate table has nothing useful below
MAX_RATE_BPS = 1e12               # 1 Tbit/s
MAX_QUEUE_PKTS = 1_000_000        # x 1514 B stays inside tc's 32-bit byte limit
MAX_FILE_SIZE = 64 << 30          # a data file lives on a tmpfs (storage: tmpfs, in all)
MAX_DISK_BYTES = 16 << 40         # storage: disk, in all (its free space decides first)
MIN_BUFFER, MAX_BUFFER = 64 << 10, 1 << 30    # a socket buffer a client asks for
MAX_TUNING_BUFFER = 2 << 30      # tuning.*mem_*: sysctls are C ints, 2 GiB is written as INT_MAX
MIN_SOCKET_BUFFER = 4 << 10       # a client's socket buffer (fdt --bufsize, iperf3 -w)
MIN_BLOCK, MAX_BLOCK = 1 << 10, 1 << 30       # fdt block (rig.fdt.protocol.MAX_BLOCK)
MAX_SIZE = 1 << 40                # any size at all, 1 TiB
MIN_MTU, MAX_MTU = 576, 65000

# --- ROOT files and read plans (a scenario's files:/clients:, and `rig plan FILE.root`) -----
MIN_ROOT_FILE = 1 << 10           # the generator writes nothing smaller
MAX_FILE_COUNT = 100_000           # files of one `count:` set (the small-files workload)
MAX_ROOT_BRANCHES = 2000          # a generated file: uproot's writer is quadratic in branches
                                  # (1,000: 5.5 s, 2,000: 24 s, 5,000: > 120 s here)
MAX_ROOT_BASKETS = 50_000         # clusters x branches of a generated file (~0.7 ms each to write)
MIN_CLUSTER, MAX_CLUSTER = 64 << 10, 1 << 30   # a generated file's cluster
MAX_SEED = 2**31 - 1
MIN_CACHE, MAX_CACHE = 64 << 10, 4 << 30       # TTreeCache size
MIN_SEGMENT, MAX_SEGMENT = 1 << 20, 4 << 30    # lazy-download segment
MAX_TRIGGER_FACTOR = 1_000_000                 # replay: IOExerciser triggerFactor
MAX_LEARN_ENTRIES = 1_000_000
MAX_BRANCH_NAMES = 10_000         # --branches: names in the list

# --- command-line values ------------------------------------------------------------
MAX_PATH_BYTES = 4095             # PATH_MAX less its NUL
MAX_NAME_BYTES = 255              # NAME_MAX: one component of a path
MAX_HOST_CHARS = 253              # a DNS name
MAX_PID = 1 << 22                 # pid_max's ceiling on Linux
