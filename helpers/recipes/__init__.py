"""One module per workload a chapter runs. Each recipe takes keyword arguments and returns a dict."""
