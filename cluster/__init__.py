"""Node process, servicers, controller, client library, CLI and the Spark audit."""
