//! Admission of creates under a burst: at most `max_starting` sandboxes start at once on this
//! host, the rest wait in a queue that is fair across tenants and, within a tenant, across its
//! clients (round robin at both levels, first come first served within one client). Every
//! waiting call is answered before its deadline: with a start slot, or with CAPACITY and a retry
//! delay (`ProviderError::Busy`), never by the caller's own timer. A call that cannot be served
//! in time is told so at once, with when to come back, estimated from the measured start time
//! and its place in the queue.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::ProviderError;

/// How the queue is sized and how long a call without a deadline may wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionLimits {
    /// Creates starting at once on this host.
    pub max_starting: usize,
    /// Calls that may wait for a slot; the next one is refused at once.
    pub max_waiting: usize,
    /// The longest a call without a deadline waits for a slot.
    pub max_wait: Duration,
    /// The start time assumed until one has been measured.
    pub first_start_estimate: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        Self {
            max_starting: default_max_starting(),
            max_waiting: 10_000,
            max_wait: Duration::from_secs(60),
            first_start_estimate: Duration::from_secs(1),
        }
    }
}

/// Creates starting at once when the operator names no number: four per CPU core, at least
/// four (a start is mostly the daemon's and the runtime's work, waiting on disk and exec).
pub fn default_max_starting() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).saturating_mul(4).max(4)
}

/// Who asks: the queue is fair across tenants, then across a tenant's clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The tenant (`""`: the operator, or a server without tenants).
    pub tenant: String,
    /// One of the tenant's clients (its connection's peer address, `""` when unknown).
    pub client: String,
}

impl Origin {
    pub fn new(tenant: Option<&str>, client: Option<String>) -> Self {
        Self { tenant: tenant.unwrap_or_default().to_string(), client: client.unwrap_or_default() }
    }
}

/// Weight of the newest start in the running estimate of a start's length.
const ESTIMATE_WEIGHT: f64 = 0.2;
/// What a refusal asks the caller to wait at least.
const MIN_RETRY: Duration = Duration::from_millis(100);
/// How many of the last starts the room given to a start is taken from.
const RECENT_STARTS: usize = 32;
/// The room a start is given over the slowest recent one (a host slowing down further).
const ROOM_FACTOR: f64 = 1.25;

/// The admission queue of one host.
pub struct Admission {
    limits: AdmissionLimits,
    state: Mutex<State>,
}

#[derive(Default)]
struct ClientQueue {
    waiters: VecDeque<u64>,
}

#[derive(Default)]
struct TenantQueue {
    clients: BTreeMap<String, ClientQueue>,
    /// The client served last: the next turn goes to the one after it.
    last_client: Option<String>,
    waiting: usize,
}

struct State {
    starting: usize,
    waiting: usize,
    tenants: BTreeMap<String, TenantQueue>,
    last_tenant: Option<String>,
    /// Queued waiters, by id: the sender that wakes them (`true`: a slot, `false`: refused, no
    /// start could end before the deadline) and the deadline.
    wakers: BTreeMap<u64, (tokio::sync::oneshot::Sender<bool>, Option<Instant>)>,
    /// When each start under way began, by slot: a start running longer than the estimate
    /// raises it before it ends (a host slowing down is seen at once, not one start later).
    running: BTreeMap<u64, Instant>,
    /// Waiters taken out of the queue with a refusal, until they read it.
    refused: std::collections::BTreeSet<u64>,
    next_id: u64,
    /// Running estimate of how long a start holds its slot, in seconds.
    start_s: f64,
    started: u64,
    /// The lengths of the last `RECENT_STARTS` starts, in seconds: a slot goes only to a call
    /// whose deadline leaves room for a start as slow as the slowest of them.
    recent: VecDeque<f64>,
}

/// A start slot: held while the sandbox starts; given back (and the start's length measured)
/// on drop.
pub struct StartSlot {
    admission: Arc<Admission>,
    id: u64,
    since: Instant,
}

impl Drop for StartSlot {
    fn drop(&mut self) {
        self.admission.release(Some((self.id, self.since.elapsed())));
    }
}

/// What the queue looks like now (for metrics, docs and tests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionView {
    pub starting: usize,
    pub waiting: usize,
    pub max_starting: usize,
    pub start_estimate: Duration,
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Arc<Self> {
        let limits = AdmissionLimits { max_starting: limits.max_starting.max(1), ..limits };
        Arc::new(Self {
            limits,
            state: Mutex::new(State {
                starting: 0,
                waiting: 0,
                tenants: BTreeMap::new(),
                last_tenant: None,
                wakers: BTreeMap::new(),
                running: BTreeMap::new(),
                refused: Default::default(),
                next_id: 1,
                start_s: limits.first_start_estimate.as_secs_f64(),
                started: 0,
                recent: VecDeque::with_capacity(RECENT_STARTS),
            }),
        })
    }

    pub fn limits(&self) -> AdmissionLimits {
        self.limits
    }

    pub fn view(&self) -> AdmissionView {
        let s = self.lock();
        AdmissionView {
            starting: s.starting,
            waiting: s.waiting,
            max_starting: self.limits.max_starting,
            start_estimate: Duration::from_secs_f64(s.start_s),
        }
    }

    /// A start slot for `origin`, answered before `deadline` (when the caller's answer must have
    /// left): the slot, or `Busy` with when to come back. A call whose wait plus one start
    /// cannot fit before its deadline is refused at once.
    pub async fn admit(
        self: &Arc<Self>,
        origin: &Origin,
        deadline: Option<Instant>,
    ) -> Result<StartSlot, ProviderError> {
        let now = Instant::now();
        let (id, mut rx, give_up) = {
            let mut s = self.lock();
            let start = room(&s, now);
            if s.waiting == 0 && s.starting < self.limits.max_starting {
                // A free slot is no use either to a call whose deadline leaves no room for a
                // start: under a burst of such calls the queue stays empty (each is refused on
                // arrival) and every freed slot went here, unchecked, to whichever retry came
                // first (the 1,000-create bench: most of its STARTUP_TIMEOUTs). With nothing
                // starting, the call is served all the same: a start measures the host anew.
                let left = deadline.map(|d| d.saturating_duration_since(now));
                if s.starting > 0 && left.is_some_and(|left| start > left) {
                    return Err(busy(
                        format!(
                            "this host cannot start the sandbox before the call's deadline: {} starting, a start \
                             takes about {} ms (up to {} ms) and {} ms are left",
                            s.starting,
                            estimate(&s, now).as_millis(),
                            start.as_millis(),
                            left.unwrap_or_default().as_millis()
                        ),
                        estimate(&s, now),
                    ));
                }
                s.starting += 1;
                publish(&s);
                return Ok(self.slot(&mut s));
            }
            let wait = self.wait_estimate(&s, &origin.tenant);
            if s.waiting >= self.limits.max_waiting {
                return Err(busy(
                    format!(
                        "{} creates are waiting for one of this host's {} start slots (server.admission.max_waiting)",
                        s.waiting, self.limits.max_starting
                    ),
                    wait,
                ));
            }
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(now);
                if wait + start > left {
                    return Err(busy(
                        format!(
                            "this host cannot start the sandbox before the call's deadline: {} starting, {} waiting, \
                             a start takes about {} ms (up to {} ms), the wait here would be about {} ms and {} ms are left",
                            s.starting,
                            s.waiting,
                            estimate(&s, now).as_millis(),
                            start.as_millis(),
                            wait.as_millis(),
                            left.as_millis()
                        ),
                        wait,
                    ));
                }
            }
            // The last moment a slot is still of use: one (slow) start before the deadline.
            let give_up = match deadline {
                Some(d) => d.checked_sub(start).unwrap_or(now).min(now + self.limits.max_wait),
                None => now + self.limits.max_wait,
            };
            let id = s.next_id;
            s.next_id += 1;
            let (tx, rx) = tokio::sync::oneshot::channel();
            s.wakers.insert(id, (tx, deadline));
            let tenant = s.tenants.entry(origin.tenant.clone()).or_default();
            tenant.clients.entry(origin.client.clone()).or_default().waiters.push_back(id);
            tenant.waiting += 1;
            s.waiting += 1;
            publish(&s);
            (id, rx, give_up)
        };
        let mut ticket = Ticket { admission: self, origin, id, armed: true };
        // The receiver outlives the timer: a grant sent as the timer fires is still ours.
        let answer = tokio::time::timeout_at(give_up.into(), &mut rx).await;
        ticket.armed = false;
        let granted = match answer {
            Ok(Ok(granted)) => granted,
            // Timed out (or the sender was dropped, which the queue never does while queued).
            _ if self.leave(origin, id) => false,
            // Answered between the timer and the lock.
            _ => rx.try_recv().unwrap_or(false),
        };
        let mut s = self.lock();
        if granted {
            return Ok(self.slot(&mut s));
        }
        s.refused.remove(&id);
        let wait = self.wait_estimate(&s, &origin.tenant);
        Err(busy(
            format!(
                "no start slot could serve this call in time on this host ({} starting, {} waiting, a start takes about {} ms)",
                s.starting,
                s.waiting,
                estimate(&s, Instant::now()).as_millis()
            ),
            wait,
        ))
    }

    /// A slot already counted in `starting`, its start timed from now.
    fn slot(self: &Arc<Self>, s: &mut State) -> StartSlot {
        let id = s.next_id;
        s.next_id += 1;
        let since = Instant::now();
        s.running.insert(id, since);
        StartSlot { admission: self.clone(), id, since }
    }

    /// How long a new call of `tenant` would wait: its place in the fair order (each tenant
    /// with waiters ahead gets as many turns as this tenant has waiters, plus one) times the
    /// time a slot takes to turn over.
    fn wait_estimate(&self, s: &State, tenant: &str) -> Duration {
        if s.waiting == 0 && s.starting < self.limits.max_starting {
            return Duration::ZERO;
        }
        let mine = s.tenants.get(tenant).map_or(0, |t| t.waiting);
        let ahead: usize = s
            .tenants
            .iter()
            .filter(|(name, _)| name.as_str() != tenant)
            .map(|(_, t)| t.waiting.min(mine + 1))
            .sum::<usize>()
            + mine;
        // Slots free one start apart on average, `max_starting` at a time.
        let rounds = (ahead + 1) as f64 / self.limits.max_starting as f64;
        estimate(s, Instant::now()).mul_f64(rounds).max(MIN_RETRY)
    }

    /// Take `id` out of the queue; false when it is not there any more (it was granted).
    fn leave(&self, origin: &Origin, id: u64) -> bool {
        let mut s = self.lock();
        let Some(tenant) = s.tenants.get_mut(&origin.tenant) else { return false };
        let Some(client) = tenant.clients.get_mut(&origin.client) else { return false };
        let Some(at) = client.waiters.iter().position(|w| *w == id) else { return false };
        client.waiters.remove(at);
        if client.waiters.is_empty() {
            tenant.clients.remove(&origin.client);
        }
        tenant.waiting -= 1;
        if tenant.waiting == 0 {
            s.tenants.remove(&origin.tenant);
        }
        s.waiting -= 1;
        s.wakers.remove(&id);
        publish(&s);
        true
    }

    /// A slot comes back (`held`: how long its start took, measured into the estimate) and
    /// goes to the next waiter in fair order.
    fn release(&self, held: Option<(u64, Duration)>) {
        let mut s = self.lock();
        if let Some((slot, held)) = held {
            s.running.remove(&slot);
            let x = held.as_secs_f64();
            s.start_s =
                if s.started == 0 { x } else { (1.0 - ESTIMATE_WEIGHT) * s.start_s + ESTIMATE_WEIGHT * x };
            s.started += 1;
            if s.recent.len() == RECENT_STARTS {
                s.recent.pop_front();
            }
            s.recent.push_back(x);
        }
        s.starting = s.starting.saturating_sub(1);
        let now = Instant::now();
        let start = room(&s, now);
        while s.starting < self.limits.max_starting {
            let Some(id) = next_in_turn(&mut s) else { break };
            let Some((tx, deadline)) = s.wakers.remove(&id) else { continue };
            // A slot is of no use to a call whose deadline comes before a start could end (one
            // as slow as the slowest recent one: a start granted on the average alone outran its
            // deadline in the burst bench, one in a hundred): it is told now and the slot goes
            // to the next.
            if deadline.is_some_and(|d| d < now + start) {
                s.refused.insert(id);
                let _ = tx.send(false);
                continue;
            }
            if tx.send(true).is_ok() {
                s.starting += 1;
            }
        }
        publish(&s);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Pops the next waiter: the tenant after the one served last, then its client after the one
/// served last, then that client's oldest call.
fn next_in_turn(s: &mut State) -> Option<u64> {
    let tenant_name = after(&s.tenants, s.last_tenant.as_deref())?;
    let tenant = s.tenants.get_mut(&tenant_name)?;
    let client_name = after(&tenant.clients, tenant.last_client.as_deref())?;
    let client = tenant.clients.get_mut(&client_name)?;
    let id = client.waiters.pop_front()?;
    if client.waiters.is_empty() {
        tenant.clients.remove(&client_name);
    }
    tenant.last_client = Some(client_name);
    tenant.waiting -= 1;
    if tenant.waiting == 0 {
        s.tenants.remove(&tenant_name);
    }
    s.last_tenant = Some(tenant_name);
    s.waiting -= 1;
    Some(id)
}

/// The first key after `last` in order, wrapping around.
fn after<V>(map: &BTreeMap<String, V>, last: Option<&str>) -> Option<String> {
    let next = match last {
        Some(last) => {
            map.range::<str, _>((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded)).next()
        }
        None => None,
    };
    next.or_else(|| map.iter().next()).map(|(k, _)| k.clone())
}

/// What a start is expected to take now: the running average, or longer while a start under
/// way has already run longer.
fn estimate(s: &State, now: Instant) -> Duration {
    let longest =
        s.running.values().map(|since| now.saturating_duration_since(*since)).max().unwrap_or_default();
    Duration::from_secs_f64(s.start_s).max(longest)
}

/// The room a granted start is given before its call's deadline: the slowest of the recent
/// starts (or of those under way, or the running average, whichever is longest), with a
/// quarter more for a host that keeps slowing down. Under a burst this costs no throughput
/// (the slot goes to the next waiter with time left); it keeps slots from calls whose start
/// would outrun their deadline.
fn room(s: &State, now: Instant) -> Duration {
    let slowest = s.recent.iter().copied().fold(0.0, f64::max);
    estimate(s, now).max(Duration::from_secs_f64(slowest)).mul_f64(ROOM_FACTOR)
}

fn busy(message: String, retry_after: Duration) -> ProviderError {
    crate::metrics::global().admission_refused.inc();
    ProviderError::Busy { message, retry_after: retry_after.max(MIN_RETRY) }
}

fn publish(s: &State) {
    let m = crate::metrics::global();
    m.admission_starting.set(s.starting as i64);
    m.admission_waiting.set(s.waiting as i64);
}

/// A queued call: should its future be dropped while queued (the caller left), it leaves the
/// queue, or gives back the slot it was granted meanwhile.
struct Ticket<'a> {
    admission: &'a Arc<Admission>,
    origin: &'a Origin,
    id: u64,
    armed: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.armed || self.admission.leave(self.origin, self.id) {
            return;
        }
        // Out of the queue already: refused (nothing held) or granted (the slot goes back).
        if !self.admission.lock().refused.remove(&self.id) {
            self.admission.release(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_starting: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_starting,
            max_waiting: 100,
            max_wait: Duration::from_secs(30),
            first_start_estimate: Duration::from_millis(50),
        }
    }

    fn origin(tenant: &str, client: &str) -> Origin {
        Origin { tenant: tenant.into(), client: client.into() }
    }

    #[tokio::test]
    async fn turns_go_round_the_tenants_then_their_clients() {
        let admission = Admission::new(limits(1));
        let held = admission.admit(&origin("a", "1"), None).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Tenant a queues 4 calls from one client, b 2 from two clients, c 1: the order of
        // turns is a, b(x), c, a, b(y), a, a.
        for (t, c) in [("a", "1"), ("a", "1"), ("a", "1"), ("a", "1"), ("b", "x"), ("b", "y"), ("c", "1")] {
            let queue = admission.clone();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let slot = queue.admit(&origin(t, c), None).await.unwrap();
                order.lock().unwrap().push(format!("{t}{c}"));
                drop(slot);
            }));
            // Queued in this order.
            while admission.view().waiting < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["a1", "bx", "c1", "a1", "by", "a1", "a1"]);
        assert_eq!(admission.view().starting, 0);
    }

    #[tokio::test]
    async fn a_call_that_cannot_fit_its_deadline_is_told_at_once_when_to_come_back() {
        let admission = Admission::new(limits(1));
        let _held = admission.admit(&origin("a", "1"), None).await.unwrap();
        let started = Instant::now();
        let refused = admission
            .admit(&origin("b", "1"), Some(Instant::now() + Duration::from_millis(20)))
            .await
            .err()
            .expect("refused");
        assert!(started.elapsed() < Duration::from_millis(10), "refused at once");
        let ProviderError::Busy { retry_after, .. } = refused else { panic!("{refused:?}") };
        assert!(retry_after >= Duration::from_millis(50), "one start ahead: {retry_after:?}");
    }

    #[tokio::test]
    async fn a_free_slot_goes_only_to_a_call_with_room_for_a_slow_start() {
        let admission = Admission::new(limits(2));
        // One start measured at 300 ms: a start is given 375 ms of room from now on.
        let slow = admission.admit(&origin("a", "1"), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(slow);
        let _held = admission.admit(&origin("a", "1"), None).await.unwrap();
        // A slot is free and nobody waits, but 200 ms cannot hold a start: told at once.
        let started = Instant::now();
        let refused = admission
            .admit(&origin("b", "1"), Some(Instant::now() + Duration::from_millis(200)))
            .await
            .err()
            .expect("refused");
        assert!(started.elapsed() < Duration::from_millis(100), "refused at once");
        assert!(matches!(refused, ProviderError::Busy { .. }), "{refused:?}");
        assert_eq!(admission.view().starting, 1);
        // With room for a slow start, the free slot is its.
        assert!(admission
            .admit(&origin("b", "1"), Some(Instant::now() + Duration::from_secs(2)))
            .await
            .is_ok());
        // With nothing starting, even a short call is served: a start measures the host anew.
        let fresh = Admission::new(limits(2));
        let slow = fresh.admit(&origin("a", "1"), None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(slow);
        assert!(fresh
            .admit(&origin("b", "1"), Some(Instant::now() + Duration::from_millis(200)))
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn a_waiter_whose_slot_never_comes_is_answered_before_its_deadline_and_leaves_no_trace() {
        let admission = Admission::new(limits(1));
        let _held = admission.admit(&origin("a", "1"), None).await.unwrap();
        let deadline = Instant::now() + Duration::from_millis(300);
        let refused = admission.admit(&origin("b", "1"), Some(deadline)).await.err().expect("refused");
        assert!(Instant::now() < deadline, "answered before the deadline");
        assert!(matches!(refused, ProviderError::Busy { .. }), "{refused:?}");
        assert_eq!(admission.view().waiting, 0);
    }

    #[tokio::test]
    async fn a_caller_that_leaves_gives_its_place_back() {
        let admission = Admission::new(limits(1));
        let held = admission.admit(&origin("a", "1"), None).await.unwrap();
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit(&origin("b", "1"), None).await.map(|_| ()) })
        };
        while admission.view().waiting == 0 {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(admission.view().waiting, 0);
        drop(held);
        assert_eq!(admission.view().starting, 0, "no slot went to the caller that left");
        assert!(admission.admit(&origin("c", "1"), None).await.is_ok());
    }
}
