"""`python -m cluster <command>`: the operator's command line (an mqadmin).

One module per group of commands, each with `register(sub)` adding its parsers; a parser's
`run` default is called with the parsed arguments and returns the exit status (0 ok, 1 the node
refused or could not be reached, 2 bad usage). Read commands print tables for people and JSON
with `--json` for scripts. cluster_cli.py lists the modules; a new command group is one more
module there.
"""
