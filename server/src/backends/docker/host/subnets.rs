//! Subnets for the service's networks from `docker.create.tenant_subnets`: a stock daemon's
//! default address pools hold about 30 bridges, so a host with a thousand tenants gives each
//! tenant network a small subnet of the operator's range instead. Which subnets are taken is
//! the daemon's word (every network's IPAM config, read when a network is made), never this
//! server's memory; two servers picking the same one at once are told by the daemon ("overlaps")
//! and pick again.

use ipnet::Ipv4Net;

use crate::config::DockerCreateConfig;

/// The operator's range and the size of each network's piece of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubnetPool {
    range: Ipv4Net,
    prefix: u8,
}

impl SubnetPool {
    /// `None` when the daemon's own pools are used (`tenant_subnets: null`); the values were
    /// checked when the config was loaded.
    pub fn from_config(create: &DockerCreateConfig) -> Option<Self> {
        let range: Ipv4Net = create.tenant_subnets.as_deref()?.parse().ok()?;
        (create.tenant_subnet_prefix >= range.prefix_len() && create.tenant_subnet_prefix <= 32)
            .then_some(Self { range: range.trunc(), prefix: create.tenant_subnet_prefix })
    }

    /// How many networks the range holds.
    pub fn capacity(&self) -> u64 {
        1u64 << (self.prefix - self.range.prefix_len())
    }

    /// A subnet of the range that overlaps none of `used`, looked for from a place that
    /// depends on `name` (servers making different networks at once seldom collide); `None`
    /// when the range is full.
    pub fn pick(&self, name: &str, used: &[Ipv4Net]) -> Option<Ipv4Net> {
        let capacity = self.capacity();
        let start = fnv(name) % capacity;
        let step = 1u32 << (32 - u32::from(self.prefix));
        let base = u32::from(self.range.network());
        (0..capacity).map(|i| (start + i) % capacity).find_map(|slot| {
            let net =
                Ipv4Net::new(base.wrapping_add(step.wrapping_mul(slot as u32)).into(), self.prefix).ok()?;
            (!used.iter().any(|u| overlaps(u, &net))).then_some(net)
        })
    }
}

/// The subnets `docker network inspect --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}'`
/// printed (IPv6 ones and blanks skipped).
pub fn parse_used(text: &str) -> Vec<Ipv4Net> {
    text.split_whitespace().filter_map(|w| w.parse::<Ipv4Net>().ok()).collect()
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// A stable hash of a network's name (FNV-1a): the same start on every server and run.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(range: &str, prefix: u8) -> SubnetPool {
        let cfg = DockerCreateConfig {
            tenant_subnets: Some(range.into()),
            tenant_subnet_prefix: prefix,
            ..Default::default()
        };
        SubnetPool::from_config(&cfg).expect("a pool")
    }

    #[test]
    fn a_range_is_carved_into_pieces_none_of_which_is_taken() {
        let p = pool("10.128.0.0/14", 24);
        assert_eq!(p.capacity(), 1024);
        let first = p.pick("sandboxd-net-red.default", &[]).unwrap();
        assert_eq!(first.prefix_len(), 24);
        assert!("10.128.0.0/14".parse::<Ipv4Net>().unwrap().contains(&first));
        assert_eq!(p.pick("sandboxd-net-red.default", &[]), Some(first), "the same start everywhere");
        // Taken by a network (or a bigger range covering it): the next one.
        let next = p.pick("sandboxd-net-red.default", &[first]).unwrap();
        assert_ne!(next, first);
        let cover: Ipv4Net = "10.128.0.0/15".parse().unwrap();
        let outside = p.pick("sandboxd-net-red.default", &[cover]).unwrap();
        assert!(!cover.contains(&outside), "{outside}");
        // Full: every piece is taken.
        let small = pool("192.168.50.0/24", 26);
        let all: Vec<Ipv4Net> =
            (0..4).map(|i| format!("192.168.50.{}/26", i * 64).parse().unwrap()).collect();
        assert_eq!(small.pick("x", &all), None);
        assert!(small.pick("x", &all[..3]).is_some());
        assert_eq!(small.pick("x", &all[..3]), Some(all[3]));
    }

    #[test]
    fn the_daemons_subnets_are_read_from_inspect_output() {
        let used = parse_used("172.17.0.0/16 \n\n10.128.4.0/24 fd00::/64 \n172.18.0.0/16 \n");
        assert_eq!(used.len(), 3);
        assert!(SubnetPool::from_config(&DockerCreateConfig::default()).is_none());
    }
}
