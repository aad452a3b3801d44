//! A ClickHouse cluster on loopback, for the tests and `kansoku lab`: one
//! ZooKeeper and shards × replicas `clickhouse-server`s, each with its own
//! directory and ports, configured as the cluster `kansoku` with the
//! `{shard}` and `{replica}` macros the schema's ZooKeeper paths use.
//! Every process is stopped by its PID when the cluster is dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the cluster has in each node's `remote_servers`.
pub const CLUSTER: &str = "kansoku";

#[derive(Debug)]
pub struct Node {
    pub shard: usize,
    pub replica: usize,
    pub http_port: u16,
    pub tcp_port: u16,
    config: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn http(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of the server's error log (or its output, where the
    /// error log is empty): what a failed start says about itself.
    fn output_tail(&self) -> String {
        let home = self.config.parent().expect("config is in its node's directory");
        let read = |name: &str| std::fs::read_to_string(home.join(name)).unwrap_or_default();
        let text = [read("server.err.log"), read("stdout")].into_iter().find(|t| !t.trim().is_empty());
        let Some(text) = text else { return "it wrote nothing".into() };
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

/// Why a start failed: a server exited before it served (worth another
/// try on fresh ports), or anything else.
#[derive(Debug)]
enum Start {
    Exited(String),
    Failed(String),
}

impl From<String> for Start {
    fn from(why: String) -> Start {
        Start::Failed(why)
    }
}

#[derive(Debug)]
pub struct LocalCluster {
    pub dir: PathBuf,
    pub zk_port: u16,
    zk: Option<Child>,
    pub nodes: Vec<Node>,
}

/// What is needed and where it is missing.
fn find(program: &str, package: &str) -> Result<PathBuf, String> {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let p = Path::new(dir).join(program);
        if p.exists() {
            return Ok(p);
        }
    }
    Err(format!("{program} not found: install it (apt-get install {package})"))
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Whether the replicas of each shard hold the same active parts of every
/// table outside `system` (part names are the same on every replica once
/// replication has carried out the same inserts and merges).
fn replicas_agree(live: &[(usize, crate::Client)]) -> bool {
    const PARTS: &str = "SELECT database, table, arrayStringConcat(arraySort(groupArray(name)), ',') \
                         FROM system.parts WHERE active AND database != 'system' \
                         GROUP BY database, table ORDER BY database, table";
    let mut seen: std::collections::HashMap<usize, String> = std::collections::HashMap::new();
    live.iter().all(|(shard, c)| match c.query(PARTS) {
        Ok(parts) => seen.entry(*shard).or_insert_with(|| parts.clone()) == &parts,
        Err(_) => false,
    })
}

/// Polls `ready` every 50 ms until it holds or `within` passes (ClickHouse
/// offers nothing to wait on: the condition is asked, never a time).
pub fn wait(what: &str, within: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    while !ready() {
        if t0.elapsed() > within {
            return Err(format!("{what} not ready after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn zk_serves(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut answer = String::new();
    s.write_all(b"srvr").is_ok() && s.read_to_string(&mut answer).is_ok() && answer.contains("Mode:")
}

fn ping(http: &str) -> bool {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(1))).build().into();
    agent
        .get(format!("http://{http}/ping"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .is_some_and(|t| t.starts_with("Ok."))
}

impl LocalCluster {
    /// Starts ZooKeeper and `shards × replicas` ClickHouse servers under
    /// `dir`, and returns once every one answers. Ports are picked free, then
    /// bound by the servers a moment later; a server that exits before it
    /// serves (another process took its port meanwhile) gets the whole
    /// cluster started again on fresh ports, in a fresh directory, up to
    /// three times.
    pub fn start(dir: &Path, shards: usize, replicas: usize) -> Result<LocalCluster, String> {
        let mut failed = Vec::new();
        for attempt in 1..=3 {
            let at = if attempt == 1 { dir.to_owned() } else { dir.join(format!("attempt-{attempt}")) };
            match LocalCluster::start_once(&at, shards, replicas) {
                Ok(cluster) => return Ok(cluster),
                Err(Start::Exited(why)) => {
                    eprintln!("local ClickHouse cluster, attempt {attempt}: {why}");
                    failed.push(why);
                }
                Err(Start::Failed(why)) => return Err(why),
            }
        }
        Err(format!("local ClickHouse cluster did not start in three attempts: {}", failed.join("; ")))
    }

    fn start_once(dir: &Path, shards: usize, replicas: usize) -> Result<LocalCluster, Start> {
        let server = find("clickhouse-server", "clickhouse-server")?;
        let java = find("java", "default-jre-headless")?;
        let zk_jar = Path::new("/usr/share/java/zookeeper.jar");
        if !zk_jar.exists() {
            return Err(Start::Failed(
                "ZooKeeper not found at /usr/share/java/zookeeper.jar: apt-get install zookeeper".into(),
            ));
        }
        let mk = |p: &Path| std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()));
        mk(dir)?;
        let zk_dir = dir.join("zookeeper");
        mk(&zk_dir.join("data"))?;
        let zk_port = free_port()?;
        let zk_cfg = zk_dir.join("zoo.cfg");
        let cfg = format!(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\nmaxClientCnxns=0\n",
            zk_dir.join("data").display()
        );
        std::fs::write(&zk_cfg, cfg).map_err(|e| e.to_string())?;
        let log =
            |name: &str| std::fs::File::create(dir.join(name)).map(Stdio::from).map_err(|e| format!("{name}: {e}"));
        let zk = Command::new(java)
            .args(["-Xmx256m", "-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"])
            .arg(format!("-Dzookeeper.log.dir={}", zk_dir.display()))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&zk_cfg)
            .stdout(log("zookeeper.out")?)
            .stderr(log("zookeeper.err")?)
            .spawn()
            .map_err(|e| format!("starting ZooKeeper: {e}"))?;
        let mut cluster = LocalCluster { dir: dir.to_owned(), zk_port, zk: Some(zk), nodes: Vec::new() };
        // Its port opens before it serves: ready once it answers `srvr`.
        wait("ZooKeeper", Duration::from_secs(60), || zk_serves(zk_port))?;

        for shard in 1..=shards {
            for replica in 1..=replicas {
                let (http_port, tcp_port) = (free_port()?, free_port()?);
                let config = dir.join(format!("ch-{shard}-{replica}")).join("config.xml");
                cluster.nodes.push(Node { shard, replica, http_port, tcp_port, config, child: None });
            }
        }
        let remote = cluster.remote_servers();
        for i in 0..cluster.nodes.len() {
            let node = &cluster.nodes[i];
            let home = node.config.parent().expect("config is in its node's directory").to_owned();
            mk(&home)?;
            std::fs::write(home.join("users.xml"), USERS).map_err(|e| e.to_string())?;
            let interserver = free_port()?;
            let config = format!(
                include_str!("local_config.xml"),
                home = home.display(),
                http = node.http_port,
                tcp = node.tcp_port,
                interserver = interserver,
                remote = remote,
                zk_port = zk_port,
                shard = node.shard,
                replica = format!("{}-{}", node.shard, node.replica),
            );
            std::fs::write(&node.config, config).map_err(|e| e.to_string())?;
            cluster.spawn(i, &server)?;
        }
        for i in 0..cluster.nodes.len() {
            cluster.ready(i)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize, server: &Path) -> Result<(), String> {
        let node = &mut self.nodes[i];
        let home = node.config.parent().expect("config is in its node's directory").to_owned();
        let out = std::fs::File::create(home.join("stdout")).map_err(|e| e.to_string())?;
        let child = Command::new(server)
            .arg(format!("--config-file={}", node.config.display()))
            .current_dir(&home)
            .stdout(Stdio::from(out.try_clone().map_err(|e| e.to_string())?))
            .stderr(Stdio::from(out))
            .spawn()
            .map_err(|e| format!("starting clickhouse-server: {e}"))?;
        node.child = Some(child);
        Ok(())
    }

    fn remote_servers(&self) -> String {
        let mut xml = format!("<{CLUSTER}>");
        let shards = self.nodes.iter().map(|n| n.shard).max().unwrap_or(0);
        for s in 1..=shards {
            xml.push_str("<shard><internal_replication>true</internal_replication>");
            for n in self.nodes.iter().filter(|n| n.shard == s) {
                xml.push_str(&format!("<replica><host>127.0.0.1</host><port>{}</port></replica>", n.tcp_port));
            }
            xml.push_str("</shard>");
        }
        xml.push_str(&format!("</{CLUSTER}>"));
        xml
    }

    /// `clickhouse://` naming every node's HTTP port (a kansoku server
    /// fails over among them), and `db`.
    pub fn url(&self, db: &str) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(Node::http).collect();
        format!("clickhouse://{}/{db}", hosts.join(","))
    }

    /// Kills node `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts node `i` again, on its ports and data, and waits for it.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        let server = find("clickhouse-server", "clickhouse-server")?;
        self.spawn(i, &server)?;
        self.ready(i).map_err(|(Start::Exited(why) | Start::Failed(why))| why)
    }

    /// Waits until every node's replicated tables have fetched what their
    /// peers took: a read after it sees every acknowledged insert on any
    /// replica (ClickHouse replicates asynchronously).
    ///
    /// A replica just restarted may show an empty queue before it has
    /// pulled the log it missed, so the queues alone are not enough: the
    /// replicas of each shard must also hold the same active parts.
    pub fn settle(&self) -> Result<(), String> {
        let live: Vec<(usize, crate::Client)> =
            self.nodes.iter().filter(|n| n.child.is_some()).map(|n| (n.shard, self.admin(n))).collect();
        wait("replication to settle", Duration::from_secs(60), || {
            let queues_empty = live.iter().all(|(_, c)| {
                // Every log entry pulled (log_pointer reached the log's
                // end) and carried out (empty queue), none read-only.
                c.query(
                    "SELECT count() FROM system.replicas \
                     WHERE is_readonly OR queue_size > 0 OR (log_max_index > 0 AND log_pointer <= log_max_index)",
                )
                .is_ok_and(|t| t.trim() == "0")
            });
            queues_empty && replicas_agree(&live)
        })
    }

    fn admin(&self, node: &Node) -> crate::Client {
        crate::Client::new(
            crate::Target { hosts: vec![node.http()], db: "system".into(), user: None, password: None },
            Duration::from_secs(5),
        )
    }

    /// Waits until node `i` answers and reaches ZooKeeper: [`Start::Exited`]
    /// at once if it exits first. A server's error ends with the tail of
    /// its log.
    fn ready(&mut self, i: usize) -> Result<(), Start> {
        let node = &mut self.nodes[i];
        let http = node.http();
        let mut exited = None;
        let answered = wait(&format!("clickhouse-server at {http}"), Duration::from_secs(90), || {
            ping(&http) || {
                exited = node.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                exited.is_some()
            }
        });
        if let Some(status) = exited {
            return Err(Start::Exited(format!(
                "clickhouse-server at {http} exited ({status}) before it served: {}",
                node.output_tail()
            )));
        }
        answered.map_err(|e| Start::Failed(format!("{e}: {}", node.output_tail())))?;
        let client = self.admin(&self.nodes[i]);
        wait(&format!("ZooKeeper from {http}"), Duration::from_secs(60), || {
            client.query("SELECT count() FROM system.zookeeper WHERE path = '/'").is_ok()
        })?;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        if let Some(mut zk) = self.zk.take() {
            let _ = zk.kill();
            let _ = zk.wait();
        }
    }
}

const USERS: &str = r#"<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage><load_balancing>in_order</load_balancing></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that exits before it serves is told at once, with what it
    /// wrote, as the kind of failure a start on fresh ports may get past.
    #[test]
    fn a_server_that_exits_before_serving_is_reported_at_once_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("ch-1-1");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            home.join("server.err.log"),
            "starting\nDB::Exception: Listen [127.0.0.1]: Address already in use\n",
        )
        .unwrap();
        let child = Command::new("false").spawn().unwrap();
        let node = Node {
            shard: 1,
            replica: 1,
            http_port: free_port().unwrap(),
            tcp_port: 0,
            config: home.join("config.xml"),
            child: Some(child),
        };
        let mut cluster = LocalCluster { dir: dir.path().to_owned(), zk_port: 0, zk: None, nodes: vec![node] };
        // Exited, not the timeout's Failed: told as soon as it was seen.
        match cluster.ready(0) {
            Err(Start::Exited(why)) => {
                assert!(why.contains("exited") && why.contains("Address already in use"), "{why}");
            }
            other => panic!("want Exited, got {other:?}"),
        }
    }
}
