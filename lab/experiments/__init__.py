"""One module per experiment id of lab.catalogue, each with `run(ctx: lab.runner.Context) -> None`."""
