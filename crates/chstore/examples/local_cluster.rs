//! Starts a ClickHouse cluster on loopback (ZooKeeper, SHARDS × REPLICAS
//! servers) under DIR and keeps it until stdin closes:
//! `cargo run -p chstore --example local_cluster -- DIR [SHARDS REPLICAS]`.
#![allow(clippy::print_stdout, reason = "the cluster's address is the output")]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(args.first().map_or("/tmp/kansoku-clickhouse", String::as_str));
    let n = |i: usize| args.get(i).map_or(2, |s| s.parse().expect("a number"));
    let cluster = chstore::local::LocalCluster::start(&dir, n(1), n(2)).unwrap_or_else(|e| {
        eprintln!("local_cluster: {e}");
        std::process::exit(1)
    });
    println!("{}", cluster.url("kansoku"));
    println!("cluster {} (ZooKeeper at 127.0.0.1:{}); close stdin to stop", chstore::local::CLUSTER, cluster.zk_port);
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
}
