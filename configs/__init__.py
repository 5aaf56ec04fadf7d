"""The YAML configs, shipped as package data (``eaglehead.configs``): each file's header comment holds
the command that runs it; ``importlib.resources.files("eaglehead.configs")`` finds them when installed."""
