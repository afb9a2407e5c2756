"""ModelConfig overrides for a tiny compactinst_demo (fast on 2 CPU cores), shared by the
training tests (the ``tiny`` fixture) and the DDP worker that torchrun starts as a script."""

TINY = {
    "backbone_width": 16,
    "hidden_dim": 64,
    "num_queries": 16,
    "dec_layers": 1,
    "nheads": 4,
    "dim_feedforward": 128,
    "gn_groups": 16,
}
