"""Link emulation: profiles (pure data) and backends (netem, userspace engine, none)."""
