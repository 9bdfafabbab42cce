//! Which files a Parquet scan's predicate can skip, told by DataFusion's own `PruningPredicate` from
//! the statistics a table format keeps for each file (Delta's log, Iceberg's manifests), so
//! that the planner drops them before any task starts.
//!
//! The statistics travel as one Arrow IPC stream holding one batch, a row per file: for each
//! column `c` of the files, `min:c` and `max:c` (of `c`'s type, null where unknown) and
//! `null_count:c` (UInt64), and `row_count` (UInt64). A column without statistics is left out.

use std::collections::HashSet;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use datafusion_common::pruning::PruningStatistics;
use datafusion_common::{Column, DataFusionError, Result, ScalarValue};
use datafusion_execution::TaskContext;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::protobuf::physical_plan_node::PhysicalPlanType;
use datafusion_proto::protobuf::PhysicalPlanNode;
use datafusion_pruning::PruningPredicateBuilder;
use prost::Message;

/// For each file of `statistics`, whether rows of it may satisfy the predicate of the Parquet
/// scan `scan` (a serialised `PhysicalPlanNode`): false only where its statistics prove that
/// none can. None when the scan has no predicate, or partition columns of its own.
pub fn files_to_read(scan: &[u8], statistics: &[u8]) -> Result<Option<Vec<bool>>> {
    let node = PhysicalPlanNode::decode(scan).map_err(|e| bad(e.to_string()))?;
    let Some(PhysicalPlanType::ParquetScan(scan)) = node.physical_plan_type else {
        return Err(bad("not a Parquet scan"));
    };
    let conf = scan.base_conf.ok_or_else(|| bad("a scan without its configuration"))?;
    let (Some(predicate), true) = (scan.predicate, conf.table_partition_cols.is_empty()) else {
        return Ok(None);
    };
    let schema: SchemaRef = Arc::new(Schema::try_from(
        conf.schema.as_ref().ok_or_else(|| bad("a scan without a schema"))?,
    )?);
    let codec = DefaultPhysicalExtensionCodec {};
    let expr = parse_physical_expr(&predicate, &TaskContext::default(), &schema, &codec)?;
    let pruning = PruningPredicateBuilder::new()
        .with_file_schema(schema)
        .try_build(expr)?;
    pruning.prune(&FileStatistics(read_batch(statistics)?)).map(Some)
}

fn bad(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Internal(format!("file pruning: {}", message.into()))
}

fn read_batch(ipc: &[u8]) -> Result<RecordBatch> {
    let mut reader = StreamReader::try_new(Cursor::new(ipc), None)?;
    let empty = RecordBatch::new_empty(reader.schema());
    Ok(reader.next().transpose()?.unwrap_or(empty))
}

/// The per-file statistics of one IPC batch (see the module's note).
struct FileStatistics(RecordBatch);

impl FileStatistics {
    fn column(&self, kind: &str, column: &Column) -> Option<ArrayRef> {
        self.0.column_by_name(&format!("{kind}:{}", column.name)).cloned()
    }
}

impl PruningStatistics for FileStatistics {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.column("min", column)
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.column("max", column)
    }

    fn num_containers(&self) -> usize {
        self.0.num_rows()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        self.column("null_count", column)
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        self.0.column_by_name("row_count").cloned()
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, UInt64Array};
    use arrow::datatypes::{DataType, Field};
    use arrow::ipc::writer::StreamWriter;
    use datafusion_expr_common::operator::Operator;
    use datafusion_physical_expr::expressions::{col, lit, BinaryExpr};
    use datafusion_physical_expr::PhysicalExpr;
    use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
    use datafusion_proto::protobuf::{FileScanExecConf, ParquetScanExecNode};

    fn batch_bytes(batch: &RecordBatch) -> Vec<u8> {
        let mut out = Vec::new();
        let mut writer = StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
        writer.write(batch).unwrap();
        writer.finish().unwrap();
        drop(writer);
        out
    }

    /// A Parquet scan of one Int64 column `x` that keeps `x <op> value`.
    fn scan(op: Operator, value: i64) -> Vec<u8> {
        let schema = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let expr: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(col("x", &schema).unwrap(), op, lit(value)));
        let predicate = serialize_physical_expr(&expr, &DefaultPhysicalExtensionCodec {}).unwrap();
        let conf = FileScanExecConf {
            schema: Some((&schema).try_into().unwrap()),
            ..Default::default()
        };
        let node = ParquetScanExecNode {
            base_conf: Some(conf),
            predicate: Some(predicate),
            ..Default::default()
        };
        PhysicalPlanNode {
            physical_plan_type: Some(PhysicalPlanType::ParquetScan(node)),
        }
        .encode_to_vec()
    }

    fn statistics(min: Vec<Option<i64>>, max: Vec<Option<i64>>, nulls: Vec<u64>, rows: Vec<u64>) -> Vec<u8> {
        batch_bytes(
            &RecordBatch::try_from_iter(vec![
                ("min:x", Arc::new(Int64Array::from(min)) as ArrayRef),
                ("max:x", Arc::new(Int64Array::from(max)) as ArrayRef),
                ("null_count:x", Arc::new(UInt64Array::from(nulls)) as ArrayRef),
                ("row_count", Arc::new(UInt64Array::from(rows)) as ArrayRef),
            ])
            .unwrap(),
        )
    }

    #[test]
    fn files_outside_the_range_are_skipped_and_unknown_ones_read() {
        let stats = statistics(
            vec![Some(0), Some(10), None],
            vec![Some(5), Some(20), None],
            vec![0; 3],
            vec![10; 3],
        );
        let read = files_to_read(&scan(Operator::Gt, 7), &stats).unwrap();
        assert_eq!(read, Some(vec![false, true, true]));
    }

    #[test]
    fn a_file_of_nulls_only_is_skipped_by_a_comparison() {
        let stats = statistics(vec![None, Some(1)], vec![None, Some(1)], vec![4, 3], vec![4, 4]);
        let read = files_to_read(&scan(Operator::Eq, 1), &stats).unwrap();
        assert_eq!(read, Some(vec![false, true]));
    }

    #[test]
    fn bad_bytes_are_an_error() {
        assert!(files_to_read(b"\xff\xff", &[]).is_err());
    }
}
