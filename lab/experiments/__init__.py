"""One module per experiment id of lab.contract.catalogue, each with `run(ctx: lab.run.context.Context) -> None`."""
