#!/usr/bin/python3
"""/write against InfluxDB 1.6's, same run: the seed-000 client's frame (28
CPUs x 10,000 samples, three integer columns: ip, pid, tid) as line protocol
in 5,000-line POSTs to `kansoku server` and to a real `influxd` (Debian's
influxdb), server CPU per point from /proc/PID/stat. Usage:
bench-write-peers.py PATH/TO/kansoku"""
import os, subprocess, time, urllib.request, tempfile, random, sys
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def wait(url):
    for _ in range(300):
        try:
            urllib.request.urlopen(url, timeout=1); return
        except Exception:
            time.sleep(0.1)
    raise SystemExit("no answer from " + url)
d = tempfile.mkdtemp()
k = subprocess.Popen([sys.argv[1], "server", "--listen", "127.0.0.1:17999", "--ingest", "127.0.0.1:17998", "--data", d + "/k"], stderr=subprocess.DEVNULL)
open(d + "/i.conf", "w").write(f'reporting-disabled = true\nbind-address = "127.0.0.1:17988"\n[meta]\n  dir = "{d}/meta"\n[data]\n  dir = "{d}/data"\n  wal-dir = "{d}/wal"\n  query-log-enabled = false\n[http]\n  bind-address = "127.0.0.1:17986"\n  log-enabled = false\n')
i = subprocess.Popen(["influxd", "-config", d + "/i.conf"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wait("http://127.0.0.1:17999/ping"); wait("http://127.0.0.1:17986/ping")
for port in (17999, 17986):
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/query", data=b"q=CREATE+DATABASE+lab", method="POST"))
# The seed-000 client's frame: 28 CPUs x 10,000 samples, three integer columns, ns times.
rng = random.Random(1)
lines = []
t0 = 1767225600000000000
for c in range(28):
    for s in range(10000):
        lines.append(f"perf,cpu={c},run=x ip={rng.getrandbits(47)}i,pid={rng.randrange(1,40000)}i,tid={rng.randrange(1,40000)}i {t0 + s * 100000 + c}")
chunks = ["\n".join(lines[j:j + 5000]).encode() for j in range(0, len(lines), 5000)]
res = {}
for name, port, pid in (("kansoku", 17999, k.pid), ("influxd", 17986, i.pid)):
    c0, w0 = cpu(pid), time.time()
    for ch in chunks:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/write?db=lab", data=ch, method="POST"))
    res[name] = (cpu(pid) - c0, time.time() - w0)
n = len(lines)
for name, (c, w) in res.items():
    print(f"{name}: {c / n * 1e6:.2f} us server CPU per point (3 integer fields), {w:.2f} s wall")
print(f"ratio influxd/kansoku: {res['influxd'][0] / res['kansoku'][0]:.1f}x")
k.kill(); i.kill()
