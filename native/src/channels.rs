//! The process's exchange channels: one bounded channel per (query, stage, task, attempt,
//! partition) a producer task streams, created by whichever side comes first.
//!
//! Each channel has one writer (the producer's sink partition) and one reader (a consumer's
//! source partition here, or the data-plane server for a consumer elsewhere). A stream ends
//! with an explicit `End`: a reader that sees its channel close without one fails, so a
//! producer that died never passes for one that finished. Releasing a query drops its
//! channels, wakes every sink and source of it, and refuses channels it asks for later.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{LazyLock, Mutex, MutexGuard};

use arrow::array::RecordBatch;
use tokio::sync::{mpsc, watch};

/// Batches a channel holds before its producer waits (back-pressure).
pub const CHANNEL_CAPACITY: usize = 8;
/// Released query ids remembered, so that a late producer is refused instead of waiting.
const RELEASED_REMEMBERED: usize = 4096;

/// One partition of one attempt of a producer task.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ChannelKey {
    pub query: String,
    pub stage: u32,
    pub task: u32,
    pub attempt: u32,
    pub partition: u32,
}

impl std::fmt::Display for ChannelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "stage {} task {} (attempt {}) partition {}",
            self.stage, self.task, self.attempt, self.partition
        )
    }
}

/// What travels in a channel.
#[derive(Debug)]
pub enum Message {
    Batch(RecordBatch),
    /// The producer failed with this error; nothing follows.
    Failed(String),
    /// The producer finished; nothing follows.
    End,
}

pub type Sender = mpsc::Sender<Message>;
pub type Receiver = mpsc::Receiver<Message>;

#[derive(Default)]
struct Slot {
    sender: Option<Sender>,
    receiver: Option<Receiver>,
}

#[derive(Default)]
struct Registry {
    slots: HashMap<ChannelKey, Slot>,
    stops: HashMap<String, watch::Sender<bool>>,
    released: HashSet<String>,
    released_order: VecDeque<String>,
    closed: HashSet<(String, u32)>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Registry {
    fn slot(&mut self, key: &ChannelKey) -> Result<&mut Slot, String> {
        if self.released.contains(&key.query) {
            return Err(format!("query {} was released: {key} is not streamed", key.query));
        }
        Ok(self.slots.entry(key.clone()).or_insert_with(|| {
            let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
            Slot {
                sender: Some(sender),
                receiver: Some(receiver),
            }
        }))
    }

    /// Forget a slot once both of its ends were taken.
    fn forget_if_taken(&mut self, key: &ChannelKey) {
        if self
            .slots
            .get(key)
            .is_some_and(|s| s.sender.is_none() && s.receiver.is_none())
        {
            self.slots.remove(key);
        }
    }
}

/// The writing end of `key`'s channel; only one writer ever gets it. A closed stage's
/// channels have no reader: sending into them ends the partition at once.
pub fn take_sender(key: &ChannelKey) -> Result<Sender, String> {
    let mut registry = registry();
    if registry.closed.contains(&(key.query.clone(), key.stage)) {
        return Ok(mpsc::channel(1).0);
    }
    let sender = registry.slot(key)?.sender.take();
    registry.forget_if_taken(key);
    sender.ok_or_else(|| format!("{key} of query {} is written twice", key.query))
}

/// The reading end of `key`'s channel; only one reader ever gets it.
pub fn take_receiver(key: &ChannelKey) -> Result<Receiver, String> {
    let mut registry = registry();
    let receiver = registry.slot(key)?.receiver.take();
    registry.forget_if_taken(key);
    receiver.ok_or_else(|| format!("{key} of query {} is read twice", key.query))
}

/// A signal that turns true when `query` is released (at once if it was).
pub fn stopped(query: &str) -> watch::Receiver<bool> {
    let mut registry = registry();
    let released = registry.released.contains(query);
    let sender = registry
        .stops
        .entry(query.to_string())
        .or_insert_with(|| watch::channel(released).0);
    sender.subscribe()
}

/// Stage `stage` of `query` has no reader any more (its consumer finished): drop its channels,
/// so its sinks stop sending; those that start later send nowhere.
pub fn close_stage(query: &str, stage: u32) {
    let mut registry = registry();
    registry.slots.retain(|key, _| key.query != query || key.stage != stage);
    registry.closed.insert((query.to_string(), stage));
}

/// Drop every channel of `query` and stop its sinks and sources; channels it asks for later
/// are refused.
pub fn release(query: &str) {
    let mut registry = registry();
    registry.slots.retain(|key, _| key.query != query);
    registry.closed.retain(|(closed, _)| closed != query);
    if let Some(stop) = registry.stops.remove(query) {
        stop.send_replace(true);
    }
    if registry.released.insert(query.to_string()) {
        registry.released_order.push_back(query.to_string());
        while registry.released_order.len() > RELEASED_REMEMBERED {
            if let Some(old) = registry.released_order.pop_front() {
                registry.released.remove(&old);
            }
        }
    }
}

/// Channels with an end not yet taken, over all queries (a finished query leaves none).
pub fn open_channels() -> usize {
    registry().slots.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(query: &str, partition: u32) -> ChannelKey {
        ChannelKey {
            query: query.into(),
            stage: 1,
            task: 0,
            attempt: 0,
            partition,
        }
    }

    #[test]
    fn each_end_is_taken_once_and_the_slot_then_goes() {
        let k = key("q-once", 0);
        take_receiver(&k).unwrap();
        assert!(take_receiver(&k).unwrap_err().contains("read twice"));
        take_sender(&k).unwrap();
        assert!(!registry().slots.contains_key(&k));
    }

    #[test]
    fn release_refuses_later_channels_and_stops_waiters() {
        let k = key("q-released", 1);
        let stop = stopped("q-released");
        take_sender(&k).unwrap();
        assert!(registry().slots.contains_key(&k));
        release("q-released");
        assert!(*stop.borrow());
        assert!(!registry().slots.contains_key(&k));
        assert!(take_receiver(&k).unwrap_err().contains("released"));
        assert!(*stopped("q-released").borrow());
    }

    #[tokio::test]
    async fn a_closed_stage_takes_no_more_batches() {
        let k = key("q-closed", 0);
        let waiting = take_sender(&k).unwrap();
        close_stage("q-closed", 1);
        assert!(waiting.send(Message::End).await.is_err());
        let late = take_sender(&key("q-closed", 1)).unwrap();
        assert!(late.send(Message::End).await.is_err());
        release("q-closed");
    }

    #[tokio::test]
    async fn a_batch_sent_is_received_in_order_with_the_end() {
        let k = key("q-order", 2);
        let sender = take_sender(&k).unwrap();
        let mut receiver = take_receiver(&k).unwrap();
        sender.send(Message::Failed("boom".into())).await.unwrap();
        sender.send(Message::End).await.unwrap();
        assert!(matches!(receiver.recv().await, Some(Message::Failed(m)) if m == "boom"));
        assert!(matches!(receiver.recv().await, Some(Message::End)));
    }
}
