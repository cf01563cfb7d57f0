import json

config = json.load(open("config.json"))
expected = {
    "service": "inventory",
    "server": {"host": "127.0.0.1", "port": 9090, "debug": False},
    "database": {"path": "data/inventory.db", "pool_size": 4},
    "features": ["search", "export"],
}
assert config == expected, "config.json differs from the expected settings"
