#!/usr/bin/python3
"""The Python `influxdb` package (Debian's python3-influxdb) against kansoku's
InfluxDB 1.x endpoints: what DataFrameClient writes comes back equal, and
64-bit unsigned integers round-trip exactly. Usage: influx_client_check.py PORT
Exit 0 when every check holds; the failing check otherwise."""
import sys

import pandas as pd
from influxdb import DataFrameClient, InfluxDBClient

port = int(sys.argv[1])
client = InfluxDBClient(host="127.0.0.1", port=port, database="lab")
assert client.ping(), "ping"
client.create_database("lab")
assert {"name": "lab"} in client.get_list_database(), client.get_list_database()

# The paper's path: a DataFrame of perf samples written as line protocol.
df_client = DataFrameClient(host="127.0.0.1", port=port, database="lab")
index = pd.date_range("2026-01-01T00:00:00Z", periods=1000, freq="1s")
frame = pd.DataFrame(
    {"cpu": [i % 4 for i in range(1000)], "load": [i / 7.0 for i in range(1000)]},
    index=index,
)
# (The client turns times into numbers through float64, which is exact for
# whole seconds only; it would send InfluxDB the same rounded times.)
df_client.write_points(frame, "perf", tags={"host": "node-1"}, batch_size=250, time_precision="s")
got = df_client.query('SELECT * FROM "perf"')["perf"]
assert len(got) == 1000, f"{len(got)} rows"
assert list(got.columns) == ["cpu", "host", "load"], list(got.columns)
assert (got.index == index).all(), "times differ"
assert (got["cpu"].values == frame["cpu"].values).all(), "cpu differs"
assert (got["load"].values == frame["load"].values).all(), "load differs"
assert (got["host"] == "node-1").all()

# Instruction pointers: 64-bit unsigned, exact.
ips = [0xFFFFFFFF81000000 + i * 0x1F for i in range(50)] + [2**64 - 1]
lines = [f"samples,host=node-1 ip={ip}u {1767225600000000000 + i}" for i, ip in enumerate(ips)]
client.write_points(lines, protocol="line")
res = client.query("SELECT ip FROM samples", epoch="ns")
back = [p["ip"] for p in res.get_points()]
assert back == ips, f"unsigned values changed: {back[:3]} ... vs {ips[:3]} ..."

# A time range and a tag condition.
res = client.query(
    "SELECT load FROM perf WHERE time >= '2026-01-01T00:00:50Z' AND host = 'node-1' LIMIT 10", epoch="ms"
)
points = list(res.get_points())
assert len(points) == 10 and points[0]["time"] == 1767225650000, points[:2]
# numpy's uint64 column as the client writes it: an `i` integer above i64.
client.write_points(["samples,host=node-2 ip=18446744071578845184i 1767225700000000000"], protocol="line")
back = [p["ip"] for p in client.query("SELECT ip FROM samples WHERE host = 'node-2'", epoch="ns").get_points()]
assert back == [18446744071578845184], back

# The paper's checks of what it wrote, in its own InfluxQL.
counts = df_client.query('SELECT count(load) FROM "perf" GROUP BY host')
frame = counts[("perf", (("host", "node-1"),))]
assert int(frame["count"].iloc[0]) == 1000, frame
keys = [p["tagKey"] for p in client.query("SHOW TAG KEYS FROM perf").get_points()]
assert keys == ["host"], keys
fields = {p["fieldKey"]: p["fieldType"] for p in client.query("SHOW FIELD KEYS FROM perf").get_points()}
assert fields == {"cpu": "integer", "load": "float"}, fields
hosts = [p["value"] for p in client.query("SHOW TAG VALUES FROM perf WITH KEY = host").get_points()]
assert hosts == ["node-1"], hosts
last3 = list(client.query("SELECT cpu FROM perf ORDER BY time DESC LIMIT 3", epoch="s").get_points())
assert [p["time"] for p in last3] == [1767226599, 1767226598, 1767226597], last3
print("influx client check: ok (1000 DataFrame rows, 52 unsigned values, ranges, counts, SHOW, ORDER BY)")
