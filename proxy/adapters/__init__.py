"""Adapter versions: what exists (registry), where it comes from (watcher), carrying it out
(broadcast). TRL writes ``trl-policy-vN`` into the bucket and asks for it by name; the proxy
keeps every replica in step."""
