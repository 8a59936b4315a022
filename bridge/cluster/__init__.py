"""RabbitMQ clusters for the cluster engine: `local` starts one on loopback (tests,
`make cluster`, benches)."""
