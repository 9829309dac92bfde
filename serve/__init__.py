"""jr2ray package."""
