//! The two ends of a streamed exchange, as DataFusion execution plan nodes.
//!
//! `ExchangeSinkExec` sits at the root of a producer task's plan: executing its partition `p`
//! drives the child's partition `p` and sends every batch into that partition's channel, then
//! yields one row saying what it sent. `StreamExchangeExec` is the leaf of a consumer task's
//! plan: its partition `k` yields the batches of the channels it was given, merged as they
//! arrive, from this process or from another worker's data-plane server.

use std::fmt;
use std::sync::{Arc, LazyLock};

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::tree_node::TreeNodeRecursion;
use datafusion_common::{DataFusionError, Result};
use datafusion_execution::{SendableRecordBatchStream, TaskContext};
use datafusion_physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion_physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion_physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties};
use futures::stream::{self, BoxStream};
use futures::StreamExt;
use tokio::sync::watch;

use crate::channels::{self, ChannelKey, Message, Receiver};
use crate::net;

fn failed(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Execution(message.into())
}

/// What each sink partition yields once done: the rows, batches and bytes it sent.
pub static SENT_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("rows", DataType::UInt64, false),
        Field::new("batches", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
    ]))
});

/// Waits until the query is released: a stopped query fails its sinks and sources at once.
async fn until_released(mut stop: watch::Receiver<bool>) {
    // an error means the registry dropped the signal, which it does only on release
    let _ = stop.wait_for(|released| *released).await;
}

/// A producer task's attempt, whose partitions each stream into a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkKey {
    pub query: String,
    pub stage: u32,
    pub task: u32,
    pub attempt: u32,
}

impl SinkKey {
    pub fn channel(&self, partition: u32) -> ChannelKey {
        ChannelKey {
            query: self.query.clone(),
            stage: self.stage,
            task: self.task,
            attempt: self.attempt,
            partition,
        }
    }
}

#[derive(Debug)]
pub struct ExchangeSinkExec {
    pub key: SinkKey,
    child: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
}

impl ExchangeSinkExec {
    pub fn new(key: SinkKey, child: Arc<dyn ExecutionPlan>) -> Self {
        let partitions = child.properties().partitioning.partition_count();
        let props = PlanProperties::new(
            EquivalenceProperties::new(SENT_SCHEMA.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            key,
            child,
            props: Arc::new(props),
        }
    }
}

/// Sends the batches of `child` into `sender`; the row it returns says what was sent. A reader
/// that went away (it needed no more: a limit), or a stage closed before it read, ends the
/// partition early, without error, and drops `child` at once: its work stops, whatever it was
/// doing (a hash table half built).
async fn drive(
    mut child: SendableRecordBatchStream,
    sender: channels::Sender,
    stop: watch::Receiver<bool>,
) -> Result<RecordBatch> {
    let released = until_released(stop);
    tokio::pin!(released);
    let (mut rows, mut batches, mut bytes) = (0u64, 0u64, 0u64);
    loop {
        let next = tokio::select! {
            biased;
            _ = &mut released => return Err(failed("the query was released while its task streamed")),
            _ = sender.closed() => break,
            next = child.next() => next,
        };
        let message = match next {
            None => Message::End,
            Some(Err(error)) => {
                let _ = sender.try_send(Message::Failed(error.to_string()));
                return Err(error);
            }
            Some(Ok(batch)) if batch.num_rows() == 0 => continue,
            Some(Ok(batch)) => {
                rows += batch.num_rows() as u64;
                batches += 1;
                bytes += batch.get_array_memory_size() as u64;
                Message::Batch(batch)
            }
        };
        let end = matches!(message, Message::End);
        let sent = tokio::select! {
            biased;
            _ = &mut released => return Err(failed("the query was released while its task streamed")),
            sent = sender.send(message) => sent,
        };
        if end || sent.is_err() {
            break; // finished, or the reader needs no more
        }
    }
    let column = |n: u64| Arc::new(UInt64Array::from(vec![n])) as _;
    Ok(RecordBatch::try_new(
        SENT_SCHEMA.clone(),
        vec![column(rows), column(batches), column(bytes)],
    )?)
}

impl DisplayAs for ExchangeSinkExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ExchangeSinkExec: stage={}, task={}, streamed",
            self.key.stage, self.key.task
        )
    }
}

impl ExecutionPlan for ExchangeSinkExec {
    fn name(&self) -> &str {
        "ExchangeSinkExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.child]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let [child] = <[_; 1]>::try_from(children).map_err(|_| failed("ExchangeSinkExec has one child"))?;
        Ok(Arc::new(Self::new(self.key.clone(), child)))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let sender = channels::take_sender(&self.key.channel(partition as u32)).map_err(failed)?;
        let stop = channels::stopped(&self.key.query);
        let child = self.child.execute(partition, context)?;
        let sent = stream::once(drive(child, sender, stop));
        Ok(Box::pin(RecordBatchStreamAdapter::new(SENT_SCHEMA.clone(), sent)))
    }
}

/// Where one channel a consumer reads is: `address` is empty for this process, else the
/// data-plane server (host:port) of the worker the producer runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelRef {
    pub address: String,
    pub key: ChannelKey,
}

impl ChannelRef {
    /// Partition `partition` of attempt `attempt` of task `task` of stage `stage` of `query`,
    /// served at `address`.
    pub fn new(address: String, query: String, stage: u32, task: u32, attempt: u32, partition: u32) -> Self {
        let key = ChannelKey {
            query,
            stage,
            task,
            attempt,
            partition,
        };
        Self { address, key }
    }
}

#[derive(Debug)]
pub struct StreamExchangeExec {
    pub partitions: Vec<Vec<ChannelRef>>,
    props: Arc<PlanProperties>,
}

impl StreamExchangeExec {
    pub fn new(schema: SchemaRef, partitions: Vec<Vec<ChannelRef>>) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(partitions.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            partitions,
            props: Arc::new(props),
        }
    }

    fn stages(&self) -> Vec<u32> {
        let mut stages: Vec<u32> = self.partitions.iter().flatten().map(|r| r.key.stage).collect();
        stages.sort_unstable();
        stages.dedup();
        stages
    }
}

/// The batches of one channel until its `End`; a channel that closes without one, or a
/// released query, is an error naming the producer.
fn channel_batches(
    receiver: Receiver,
    channel: ChannelRef,
    stop: watch::Receiver<bool>,
) -> BoxStream<'static, Result<RecordBatch>> {
    let state = Some((receiver, Box::pin(until_released(stop))));
    stream::unfold(state, move |state| {
        let channel = channel.clone();
        async move {
            let (mut receiver, mut released) = state?;
            let message = tokio::select! {
                biased;
                _ = &mut released => return Some((Err(failed("the query was released while a task read its input")), None)),
                message = receiver.recv() => message,
            };
            let from = match channel.address.as_str() {
                "" => String::new(),
                address => format!(" on {address}"),
            };
            match message {
                Some(Message::Batch(batch)) => Some((Ok(batch), Some((receiver, released)))),
                Some(Message::End) => None,
                Some(Message::Failed(error)) => Some((Err(failed(error)), None)),
                None => {
                    let error = format!("the stream of {}{from} ended before its producer finished", channel.key);
                    Some((Err(failed(error)), None))
                }
            }
        }
    })
    .boxed()
}

impl DisplayAs for StreamExchangeExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let stages: Vec<String> = self.stages().iter().map(u32::to_string).collect();
        let channels: usize = self.partitions.iter().map(Vec::len).sum();
        write!(
            f,
            "StreamExchangeExec: from stage {}, {channels} channel(s)",
            stages.join(",")
        )
    }
}

impl ExecutionPlan for StreamExchangeExec {
    fn name(&self) -> &str {
        "StreamExchangeExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let refs = self
            .partitions
            .get(partition)
            .ok_or_else(|| failed(format!("StreamExchangeExec has no partition {partition}")))?;
        let mut streams = Vec::with_capacity(refs.len());
        for channel in refs {
            let receiver = if channel.address.is_empty() {
                channels::take_receiver(&channel.key).map_err(failed)?
            } else {
                net::fetch(&channel.address, &channel.key)
            };
            let stop = channels::stopped(&channel.key.query);
            streams.push(channel_batches(receiver, channel.clone(), stop));
        }
        let merged = stream::select_all(streams);
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), merged)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;

    fn one_batch_then_forever() -> SendableRecordBatchStream {
        let column = Arc::new(Int32Array::from(vec![1, 2, 3]));
        let batch = RecordBatch::try_from_iter([("n", column as _)]).unwrap();
        let schema = batch.schema();
        let batches = stream::once(async move { Ok(batch) }).chain(stream::pending());
        Box::pin(RecordBatchStreamAdapter::new(schema, batches))
    }

    #[tokio::test]
    async fn a_sink_whose_reader_went_away_stops_its_child_and_ends_without_error() {
        let key = ChannelKey {
            query: "q-reader-gone".into(),
            stage: 0,
            task: 0,
            attempt: 0,
            partition: 0,
        };
        let sender = channels::take_sender(&key).unwrap();
        let mut receiver = channels::take_receiver(&key).unwrap();
        let stop = channels::stopped(&key.query);
        let driven = tokio::spawn(drive(one_batch_then_forever(), sender, stop));
        assert!(matches!(receiver.recv().await, Some(Message::Batch(_))));
        drop(receiver); // the child never ends: only the reader's going can end the sink
        let sent = tokio::time::timeout(std::time::Duration::from_secs(5), driven)
            .await
            .expect("the sink went on after its reader left")
            .unwrap()
            .unwrap();
        let rows = sent.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(rows.value(0), 3);
        channels::release(&key.query);
    }
}
