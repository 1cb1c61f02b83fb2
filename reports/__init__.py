"""Tables and figures built only from finished run directories."""
