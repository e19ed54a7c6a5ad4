"""`kernattn check-variant NAME`: the conformance suite any attention variant passes, built-in or
plugin (cli.py): the module-level checks of kernattn.attention.conformance, then a micro char
model trained with it through the engine (training.py). Above the tracks: it trains one."""
