//! The poller's sockets: every request sent with `sendmmsg` in batches,
//! every datagram waiting read with `recvmmsg`, the kernel's receive drops
//! read from `SO_RXQ_OVFL`, source addresses looked up with a cheap hash.

use super::*;

/// Hashes source addresses for the per-answer lookup: a multiply-xor over
/// the words written (FxHash's scheme). Not DoS-resistant, and need not be:
/// the keys are the configured targets; a forged source only misses.
#[derive(Debug, Default)]
pub(super) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(n as u64);
    }

    fn write_u16(&mut self, n: u16) {
        self.add(n as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl AddrHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// One `recvmmsg` on `sock` into `bufs`; fills `received` with (length,
/// source) and updates the socket's kernel drop counter. Returns the count.
pub(super) fn recv_some(
    sock: &UdpSocket,
    hdrs: &mut MultiHeaders<SockaddrStorage>,
    bufs: &mut [Vec<u8>],
    received: &mut Vec<(usize, Option<SocketAddr>, i64)>,
    drops: &mut u32,
) -> io::Result<usize> {
    received.clear();
    let mut slices: Vec<[IoSliceMut<'_>; 1]> = bufs.iter_mut().map(|b| [IoSliceMut::new(&mut b[..])]).collect();
    let results = match recvmmsg(sock.as_fd().as_raw_fd(), hdrs, slices.iter_mut(), MsgFlags::MSG_DONTWAIT, None) {
        Ok(r) => r,
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    for m in results {
        let mut arrived_ns = None;
        if let Ok(cmsgs) = m.cmsgs() {
            for c in cmsgs {
                match c {
                    ControlMessageOwned::RxqOvfl(n) => *drops = n,
                    ControlMessageOwned::ScmTimestampns(ts) => {
                        arrived_ns = Some(ts.tv_sec() * 1_000_000_000 + ts.tv_nsec());
                    }
                    _ => {}
                }
            }
        }
        received.push((m.bytes, m.address.and_then(to_std), arrived_ns.unwrap_or_else(realtime_ns)));
    }
    Ok(received.len())
}

pub(super) fn to_std(a: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::V6((*v6).into()))
}

impl Poller {
    pub(super) fn send_all(&mut self, deadline_mono: i64) {
        let mut hdrs = MultiHeaders::<SockaddrStorage>::preallocate(MMSG, None);
        let no_cmsgs: [ControlMessage<'_>; 0] = [];
        for (s, members) in self.sock_targets.iter().enumerate() {
            let fd = self.socks[s].as_raw_fd();
            let mut at = 0;
            while at < members.len() {
                let chunk = &members[at..(at + MMSG).min(members.len())];
                let slices: Vec<[IoSlice<'_>; 1]> =
                    chunk.iter().map(|&i| [IoSlice::new(self.targets[i].request.bytes())]).collect();
                let addrs: Vec<Option<SockaddrStorage>> =
                    chunk.iter().map(|&i| Some(self.targets[i].sockaddr)).collect();
                let now = realtime_ns();
                match sendmmsg(fd, &mut hdrs, slices.iter(), &addrs, no_cmsgs, MsgFlags::MSG_DONTWAIT) {
                    Ok(results) => {
                        let sent = results.count().max(1).min(chunk.len());
                        for &i in &chunk[..sent] {
                            self.targets[i].sent_ns = now;
                        }
                        at += sent;
                    }
                    Err(Errno::EAGAIN) => {
                        // Send buffer full: wait for room, within the slice.
                        let left = deadline_mono - monotonic_ns();
                        if left <= 0 {
                            let rest = (members.len() - at) as u64;
                            self.stats.send_errors.fetch_add(rest, Ordering::Relaxed);
                            break;
                        }
                        let mut fds = [PollFd::new(&self.socks[s], PollFlags::OUT)];
                        let ts = rustix::time::Timespec { tv_sec: 0, tv_nsec: left.min(10_000_000) };
                        let _ = rustix::event::poll(&mut fds, Some(&ts));
                    }
                    Err(Errno::EINTR) => {}
                    Err(e) => {
                        // The first datagram of the chunk failed (unreachable
                        // network, ...): count it, go on with the rest.
                        let t = &self.targets[chunk[0]];
                        if self.stats.send_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            tracing::warn!(
                                "SNMP send to {} failed: {e} (counted in kansoku_snmp_send_errors_total)",
                                t.addr
                            );
                        }
                        at += 1;
                    }
                }
            }
        }
    }

    /// One `recvmmsg` on socket `s` into `self.received`, its kernel drops
    /// counted; the datagrams read (0 on an error, which is logged).
    pub(super) fn recv_batch(&mut self, hdrs: &mut MultiHeaders<SockaddrStorage>, s: usize) -> usize {
        let got = recv_some(&self.socks[s], hdrs, &mut self.bufs, &mut self.received, &mut self.drops_seen[s]);
        got.unwrap_or_else(|e| {
            tracing::warn!("SNMP receive: {e}");
            0
        })
    }

    /// Reads every datagram waiting on every socket and handles it.
    pub(super) fn receive(
        &mut self,
        hdrs: &mut MultiHeaders<SockaddrStorage>,
        socks: &[usize],
        batch: &mut Batch,
        boundary_ns: i64,
        draining: bool,
    ) {
        for &s in socks {
            loop {
                let n = self.recv_batch(hdrs, s);
                for k in 0..self.received.len() {
                    let (len, from, arrived_ns) = self.received[k];
                    self.handle(k, len, from, arrived_ns, batch, boundary_ns, draining);
                }
                if n < MMSG {
                    break;
                }
            }
        }
        let drops: u64 = self.drops_seen.iter().map(|&d| d as u64).sum();
        self.stats.kernel_drops.store(drops, Ordering::Relaxed);
    }
}
