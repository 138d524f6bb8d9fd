"""Test infrastructure: real servers on 127.0.0.1 (moto_server per region, PostgreSQL)."""
