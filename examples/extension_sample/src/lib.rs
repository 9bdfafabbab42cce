//! A user extension that runs inside distributed queries.
//!
//! - `SampleExec` keeps about one row in `one_in`, chosen by the hash of the row's values, so
//!   the same rows are kept however the data is split into partitions, tasks and machines.
//! - `SampleScans` is the physical optimizer rule that puts a `SampleExec` over every scan.
//! - `SampleCodec` writes a `SampleExec` into plan bytes and reads it back: the workers that
//!   run a distributed query's tasks decode their plans with it.

use std::fmt;
use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::compute::filter_record_batch;
use arrow::record_batch::RecordBatch;
use datafusion_common::config::ConfigOptions;
use datafusion_common::hash_utils::{create_hashes, RandomState};
use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{DataFusionError, Result};
use datafusion_execution::{SendableRecordBatchStream, TaskContext};
use datafusion_physical_optimizer::PhysicalOptimizerRule;
use datafusion_physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::StreamExt;

#[cfg(feature = "python")]
mod python;

/// The id the `datafusion` wheel routes this codec's nodes by.
pub const CODEC_ID: &str = "extension_sample.SampleCodec";

/// Keeps the rows of its input whose values hash to 0 modulo `one_in`.
#[derive(Debug)]
pub struct SampleExec {
    pub one_in: u64,
    input: Arc<dyn ExecutionPlan>,
    props: Arc<PlanProperties>,
}

impl SampleExec {
    pub fn new(one_in: u64, input: Arc<dyn ExecutionPlan>) -> Result<Self> {
        if one_in == 0 {
            return Err(DataFusionError::Plan("SampleExec: one_in must be at least 1".into()));
        }
        // a filter: the input's partitioning, order and boundedness stay as they are
        let props = Arc::clone(input.properties());
        Ok(Self { one_in, input, props })
    }
}

/// The rows of `batch` that `SampleExec` keeps.
pub fn sample(batch: &RecordBatch, one_in: u64) -> Result<RecordBatch> {
    let mut hashes = vec![0u64; batch.num_rows()];
    create_hashes(batch.columns(), &RandomState::with_seed(0), &mut hashes)?;
    let keep: BooleanArray = hashes.iter().map(|h| Some(h % one_in == 0)).collect();
    Ok(filter_record_batch(batch, &keep)?)
}

impl DisplayAs for SampleExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SampleExec: one_in={}", self.one_in)
    }
}

impl ExecutionPlan for SampleExec {
    fn name(&self) -> &str {
        "SampleExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn datafusion_physical_plan::PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] =
            <[_; 1]>::try_from(children).map_err(|_| DataFusionError::Internal("SampleExec has one child".into()))?;
        Ok(Arc::new(Self::new(self.one_in, input)?))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let one_in = self.one_in;
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let sampled = input.map(move |batch| sample(&batch?, one_in));
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, sampled)))
    }
}

/// Puts a `SampleExec` over every scan (`DataSourceExec`) of a plan, once.
#[derive(Debug)]
pub struct SampleScans {
    pub one_in: u64,
}

impl PhysicalOptimizerRule for SampleScans {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _config: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_down(|node| {
            if node.name() == "SampleExec" {
                return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
            }
            if node.name() != "DataSourceExec" {
                return Ok(Transformed::no(node));
            }
            let sampled = Arc::new(SampleExec::new(self.one_in, node)?) as Arc<dyn ExecutionPlan>;
            Ok(Transformed::new(sampled, true, TreeNodeRecursion::Jump))
        })
        .map(|done| done.data)
    }

    fn name(&self) -> &str {
        "sample_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Writes a `SampleExec` as its `one_in` (8 bytes, little-endian); its input travels as the
/// extension node's input.
#[derive(Debug)]
pub struct SampleCodec;

impl PhysicalExtensionCodec for SampleCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let one_in = <[u8; 8]>::try_from(buf)
            .map_err(|_| DataFusionError::Internal(format!("SampleCodec: a payload of {} bytes, not 8", buf.len())))?;
        let [input] = inputs else {
            return Err(DataFusionError::Internal(
                "SampleCodec: a SampleExec has one input".into(),
            ));
        };
        Ok(Arc::new(SampleExec::new(
            u64::from_le_bytes(one_in),
            Arc::clone(input),
        )?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(sample) = node.downcast_ref::<SampleExec>() else {
            return Err(DataFusionError::Internal(format!(
                "SampleCodec: {} is not a SampleExec",
                node.name()
            )));
        };
        buf.extend_from_slice(&sample.one_in.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(range: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let strings: Vec<String> = range.clone().map(|n| format!("row {n}")).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(range)),
                Arc::new(StringArray::from(strings)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_rows_kept_do_not_depend_on_how_the_rows_are_split() {
        let whole = sample(&batch(0..1000), 10).unwrap();
        let halves = [
            sample(&batch(0..500), 10).unwrap(),
            sample(&batch(500..1000), 10).unwrap(),
        ];
        assert_eq!(whole.num_rows(), halves.iter().map(|b| b.num_rows()).sum::<usize>());
        assert!(
            (50..150).contains(&whole.num_rows()),
            "{} rows kept of 1000",
            whole.num_rows()
        );
    }

    #[test]
    fn one_in_one_keeps_every_row_and_zero_is_refused() {
        assert_eq!(sample(&batch(0..100), 1).unwrap().num_rows(), 100);
        let scan: Arc<dyn ExecutionPlan> =
            Arc::new(datafusion_physical_plan::empty::EmptyExec::new(batch(0..1).schema()));
        assert!(SampleExec::new(0, scan).is_err());
    }
}
