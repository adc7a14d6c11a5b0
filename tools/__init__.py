"""Command-line tools: the ``rmqgate`` CLI, pcap decoding, capture files, recording proxy, replay."""
