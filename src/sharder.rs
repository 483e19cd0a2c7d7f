//! Shuffle sharding for anything: a tenant's shard of worker addresses,
//! queue names or cells, by the same specified assignment as the limiter's
//! buckets.

use std::fmt;

use crate::{Assignment, MAX_BUCKETS, MAX_PER_TENANT, Shard};

/// Why a [`Sharder`] was refused. Every message says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharderError {
    /// The list of resources was empty.
    NoResources,
    /// More resources than the assignment ranks ([`MAX_BUCKETS`]).
    TooManyResources {
        /// How many resources were given.
        resources: usize,
    },
    /// `per_tenant` (k) was 0, above the number of resources, or above
    /// [`MAX_PER_TENANT`].
    PerTenant {
        /// The k that was given.
        per_tenant: u32,
        /// How many resources were given.
        resources: usize,
    },
}

impl fmt::Display for SharderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SharderError::NoResources => f.write_str(
                "the sharder was given no resources: pass at least one (and at least \
                 per_tenant of them)",
            ),
            SharderError::TooManyResources { resources } => write!(
                f,
                "{resources} resources are more than the assignment ranks ({MAX_BUCKETS}): \
                 pass at most {MAX_BUCKETS}, for example by sharding over groups of them"
            ),
            SharderError::PerTenant {
                per_tenant,
                resources,
            } => {
                let most = (resources as u64).min(u64::from(MAX_PER_TENANT));
                write!(
                    f,
                    "per_tenant is {per_tenant}, but each tenant needs between 1 and {most} \
                     resources (at most the {resources} given and at most {MAX_PER_TENANT}): \
                     set per_tenant between 1 and {most}"
                )
            }
        }
    }
}

impl std::error::Error for SharderError {}

/// A tenant's shard of a list of resources, and a stable member of it per
/// resource id, by the specified assignment (docs/assignment.md).
///
/// With `N` resources and `k` per tenant, a tenant's shard is
/// [`Assignment::new(N, k, salt).shard(tenant)`](Assignment::shard) with
/// each bucket index `i` read as `resources[i]`: the same specification,
/// the same known-answer vectors, in any language that implements them.
/// [`pick`](Self::pick) sends a resource id (an order id, a customer's
/// key) to one member of the shard, always the same, by the user subset of
/// the specification with `j = 1` and the id as the user:
/// [`Assignment::user_subset(tenant, id, 1)`](Assignment::user_subset).
/// [`retry_order`](Self::retry_order) lists the whole shard in that id's
/// order, skipping the members a caller reports unhealthy.
///
/// ```
/// use shuffle_limiter::Sharder;
///
/// let workers: Vec<String> = (0..8).map(|i| format!("10.0.0.{i}:7000")).collect();
/// let sharder = Sharder::new(workers, 2, b"my-salt")?;
/// let shard = sharder.shard("tenant-0");
/// assert_eq!(shard.len(), 2);
/// // An order always goes to the same member of its tenant's shard ...
/// let worker = sharder.pick("tenant-0", "order-17");
/// assert!(shard.contains(&worker));
/// // ... and when that worker is sick, to the other one.
/// let sick = worker.clone();
/// let next: Vec<&String> = sharder
///     .retry_order("tenant-0", "order-17", |w| *w != sick)
///     .collect();
/// assert_eq!(next.len(), 1);
/// assert!(shard.contains(&next[0]) && *next[0] != sick);
/// # Ok::<(), shuffle_limiter::SharderError>(())
/// ```
///
/// # Changing the list
///
/// Resources are ranked by their *index* in the list, never by their value.
/// So:
///
/// * **A sick or drained member** stays in the list; callers skip it with
///   [`retry_order`](Self::retry_order) or
///   [`pick_healthy`](Self::pick_healthy). That is a rendezvous over the
///   shard: only the ids whose pick was that member move, each to its next
///   member, and they come back when it is healthy again.
/// * **Replacing** a resource in place (same index, new address) keeps every
///   tenant's shard and every id's pick.
/// * **Growing or shrinking at the end** of the list moves the fewest
///   tenants any fair assignment can (docs/assignment.md, "What is
///   guaranteed"): adding resource `N` changes the shard of a share
///   `k / (N + 1)` of tenants, by one member each.
/// * **Removing from the middle** renumbers every resource after it and
///   reshuffles most tenants. Mark it unhealthy, or replace it, instead.
#[derive(Clone)]
pub struct Sharder<T> {
    resources: Vec<T>,
    assignment: Assignment,
}

/// # Construction
impl<T> Sharder<T> {
    /// A sharder giving each tenant `per_tenant` of `resources`, under
    /// `salt` (use a secret of 16 random bytes or more if tenants must not
    /// learn whom they share with; see docs/assignment.md).
    ///
    /// # Errors
    ///
    /// [`SharderError::NoResources`] for an empty list,
    /// [`SharderError::TooManyResources`] above [`MAX_BUCKETS`], and
    /// [`SharderError::PerTenant`] unless `1 ≤ per_tenant ≤ min(N,
    /// MAX_PER_TENANT)`.
    ///
    /// ```
    /// use shuffle_limiter::{Sharder, SharderError};
    ///
    /// let err = Sharder::new(vec!["a", "b"], 3, b"").unwrap_err();
    /// assert_eq!(err, SharderError::PerTenant { per_tenant: 3, resources: 2 });
    /// assert!(err.to_string().contains("set per_tenant between 1 and 2"));
    /// ```
    pub fn new(
        resources: Vec<T>,
        per_tenant: u32,
        salt: impl AsRef<[u8]>,
    ) -> Result<Sharder<T>, SharderError> {
        let count = resources.len();
        if count == 0 {
            return Err(SharderError::NoResources);
        }
        let n = u32::try_from(count)
            .ok()
            .filter(|&n| n <= MAX_BUCKETS)
            .ok_or(SharderError::TooManyResources { resources: count })?;
        let assignment = Assignment::new(n, per_tenant, salt).ok_or(SharderError::PerTenant {
            per_tenant,
            resources: count,
        })?;
        Ok(Sharder {
            resources,
            assignment,
        })
    }

    /// All resources, in the order given (index `i` is bucket `i` of the
    /// assignment).
    pub fn resources(&self) -> &[T] {
        &self.resources
    }

    /// k: resources per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.assignment.per_tenant()
    }

    /// The assignment over the resources' indices, for the indices
    /// themselves (`assignment().shard(tenant).buckets()`).
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }
}

/// # A tenant's shard
impl<T> Sharder<T> {
    /// The tenant's k resources, highest rank first.
    ///
    /// ```
    /// use shuffle_limiter::{Assignment, Sharder};
    ///
    /// let queues = ["q0", "q1", "q2", "q3", "q4"];
    /// let sharder = Sharder::new(queues.to_vec(), 2, b"")?;
    /// // docs/assignment.md's first vector: N = 5, k = 2, the empty tenant -> 1, 0.
    /// assert_eq!(sharder.shard(""), [&"q1", &"q0"]);
    /// assert_eq!(Assignment::new(5, 2, b"").unwrap().shard("").buckets(), [1, 0]);
    /// # Ok::<(), shuffle_limiter::SharderError>(())
    /// ```
    pub fn shard(&self, tenant: impl AsRef<[u8]>) -> Vec<&T> {
        self.members(self.assignment.shard(tenant))
    }

    /// The member of the tenant's shard that `id` always goes to: the first
    /// of [`user_subset(tenant, id, 1)`](Assignment::user_subset). Ids
    /// spread evenly over the shard.
    ///
    /// ```
    /// use shuffle_limiter::Sharder;
    ///
    /// let sharder = Sharder::new((0..16).collect::<Vec<u32>>(), 4, b"")?;
    /// let first = *sharder.pick("tenant-0", "order-1");
    /// assert_eq!(*sharder.pick("tenant-0", "order-1"), first);
    /// assert!(sharder.shard("tenant-0").contains(&&first));
    /// # Ok::<(), shuffle_limiter::SharderError>(())
    /// ```
    pub fn pick(&self, tenant: impl AsRef<[u8]>, id: impl AsRef<[u8]>) -> &T {
        &self.resources[self.ranked(tenant, id, 1).buckets()[0] as usize]
    }

    /// The first healthy member of [`retry_order`](Self::retry_order), or
    /// `None` when the whole shard is unhealthy: [`pick`](Self::pick) with
    /// members taken out of service. Only the ids whose pick is unhealthy
    /// move.
    ///
    /// ```
    /// use shuffle_limiter::Sharder;
    ///
    /// let sharder = Sharder::new(vec!["a", "b", "c", "d"], 2, b"")?;
    /// let usual = *sharder.pick("t", "id-9");
    /// assert_eq!(sharder.pick_healthy("t", "id-9", |_| true), Some(&usual));
    /// let other = sharder.pick_healthy("t", "id-9", |w| *w != usual).unwrap();
    /// assert_ne!(*other, usual);
    /// assert_eq!(sharder.pick_healthy("t", "id-9", |_| false), None);
    /// # Ok::<(), shuffle_limiter::SharderError>(())
    /// ```
    pub fn pick_healthy<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        healthy: F,
    ) -> Option<&T>
    where
        F: FnMut(&T) -> bool,
    {
        self.retry_order(tenant, id, healthy).next()
    }

    /// The tenant's whole shard in `id`'s order, the order of
    /// [`user_subset(tenant, id, k)`](Assignment::user_subset), without the
    /// members for which `healthy` returns `false`: the first is
    /// [`pick`](Self::pick) when it is healthy, the rest are where to retry.
    /// `healthy` is asked lazily, once per member reached.
    ///
    /// ```
    /// use shuffle_limiter::Sharder;
    ///
    /// let sharder = Sharder::new((0..10).collect::<Vec<u32>>(), 3, b"")?;
    /// let all: Vec<u32> = sharder.retry_order("t", "job-1", |_| true).copied().collect();
    /// assert_eq!(all.len(), 3);
    /// assert_eq!(all[0], *sharder.pick("t", "job-1"));
    /// let without_first: Vec<u32> =
    ///     sharder.retry_order("t", "job-1", |&w| w != all[0]).copied().collect();
    /// assert_eq!(without_first, all[1..]);
    /// # Ok::<(), shuffle_limiter::SharderError>(())
    /// ```
    pub fn retry_order<F>(
        &self,
        tenant: impl AsRef<[u8]>,
        id: impl AsRef<[u8]>,
        healthy: F,
    ) -> RetryOrder<'_, T, F>
    where
        F: FnMut(&T) -> bool,
    {
        RetryOrder {
            resources: &self.resources,
            order: self.ranked(tenant, id, self.per_tenant()),
            next: 0,
            healthy,
        }
    }

    /// The first `j` members of the shard in the id's order.
    fn ranked(&self, tenant: impl AsRef<[u8]>, id: impl AsRef<[u8]>, j: u32) -> Shard {
        self.assignment
            .user_subset(tenant, id, j)
            .expect("1 <= j <= k, checked by Sharder::new")
    }

    fn members(&self, shard: Shard) -> Vec<&T> {
        shard
            .buckets()
            .iter()
            .map(|&i| &self.resources[i as usize])
            .collect()
    }
}

impl<T: fmt::Debug> fmt::Debug for Sharder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharder")
            .field("resources", &self.resources)
            .field("per_tenant", &self.per_tenant())
            .finish_non_exhaustive()
    }
}

/// The healthy members of a tenant's shard in one id's order; made by
/// [`Sharder::retry_order`].
pub struct RetryOrder<'a, T, F> {
    resources: &'a [T],
    order: Shard,
    next: usize,
    healthy: F,
}

impl<'a, T, F: FnMut(&T) -> bool> Iterator for RetryOrder<'a, T, F> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        while let Some(&i) = self.order.buckets().get(self.next) {
            self.next += 1;
            let member = &self.resources[i as usize];
            if (self.healthy)(member) {
                return Some(member);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.order.buckets().len() - self.next))
    }
}

impl<T, F> fmt::Debug for RetryOrder<'_, T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryOrder")
            .field("order", &self.order.buckets())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}
