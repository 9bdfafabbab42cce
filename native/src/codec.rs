//! How the exchange nodes travel inside plan bytes.
//!
//! A node is a `PhysicalPlanNode` whose `extension` field (18) holds a `PhysicalExtensionNode`:
//! its `node` bytes are the payload below, tagged with the codec id the way the `datafusion`
//! wheel routes extension nodes to the codec that made them, and its `inputs` are the node's
//! children. A source carries, as its one input, the subtree it stands for: only that
//! subtree's schema is used (the schema DataFusion planned there), never its execution. When
//! DataFusion encodes a source again, the schema goes into the payload instead.

use std::io::Cursor;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use datafusion_common::{DataFusionError, Result};
use datafusion_execution::TaskContext;
use datafusion_physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::exchange::{ChannelRef, ExchangeSinkExec, SinkKey, StreamExchangeExec};

/// The id the wheel routes this codec's nodes by.
pub const CODEC_ID: &str = "datafusion_distributed.exchange";
const VERSION: u8 = 1;
const SINK: u8 = 1;
const SOURCE_SCHEMA_FROM_INPUT: u8 = 2;
const SOURCE_SCHEMA_INLINE: u8 = 3;
/// The wheel's tag before a codec's payload: magic, tag version, id length (u32 LE), id.
const TAG_MAGIC: &[u8] = b"DFPYCHN\x01";

fn bad(message: impl Into<String>) -> DataFusionError {
    DataFusionError::Internal(format!("exchange codec: {}", message.into()))
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn bytes(&mut self, value: &[u8]) {
        self.u32(value.len() as u32);
        self.0.extend_from_slice(value);
    }
    fn channel(&mut self, channel: &ChannelRef) {
        self.bytes(channel.address.as_bytes());
        self.key(
            &channel.key.query,
            channel.key.stage,
            channel.key.task,
            channel.key.attempt,
        );
        self.u32(channel.key.partition);
    }
    fn key(&mut self, query: &str, stage: u32, task: u32, attempt: u32) {
        self.bytes(query.as_bytes());
        self.u32(stage);
        self.u32(task);
        self.u32(attempt);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad("payload cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| bad("a name is not UTF-8"))
    }
    fn sink_key(&mut self) -> Result<SinkKey> {
        Ok(SinkKey {
            query: self.string()?,
            stage: self.u32()?,
            task: self.u32()?,
            attempt: self.u32()?,
        })
    }
    fn channel(&mut self) -> Result<ChannelRef> {
        let address = self.string()?;
        let SinkKey {
            query,
            stage,
            task,
            attempt,
        } = self.sink_key()?;
        Ok(ChannelRef::new(address, query, stage, task, attempt, self.u32()?))
    }
}

pub fn sink_payload(key: &SinkKey) -> Vec<u8> {
    let mut w = Writer(vec![VERSION, SINK]);
    w.key(&key.query, key.stage, key.task, key.attempt);
    w.0
}

/// A source's payload; with `schema` it stands alone, without it the schema comes from the
/// node's one input.
pub fn source_payload(partitions: &[Vec<ChannelRef>], schema: Option<&SchemaRef>) -> Result<Vec<u8>> {
    let kind = if schema.is_some() {
        SOURCE_SCHEMA_INLINE
    } else {
        SOURCE_SCHEMA_FROM_INPUT
    };
    let mut w = Writer(vec![VERSION, kind]);
    w.u32(partitions.len() as u32);
    for channels in partitions {
        w.u32(channels.len() as u32);
        channels.iter().for_each(|c| w.channel(c));
    }
    if let Some(schema) = schema {
        let mut ipc = Vec::new();
        StreamWriter::try_new(&mut ipc, schema)?.finish()?;
        w.bytes(&ipc);
    }
    Ok(w.0)
}

/// The node a payload describes, over `inputs` (the decoded children).
pub fn decode(payload: &[u8], inputs: &[Arc<dyn ExecutionPlan>]) -> Result<Arc<dyn ExecutionPlan>> {
    let mut r = Reader(payload);
    if r.u8()? != VERSION {
        return Err(bad("a plan from another version of datafusion-distributed"));
    }
    match r.u8()? {
        SINK => {
            let [child] = inputs else {
                return Err(bad("a sink has one input"));
            };
            Ok(Arc::new(ExchangeSinkExec::new(r.sink_key()?, Arc::clone(child))))
        }
        kind @ (SOURCE_SCHEMA_FROM_INPUT | SOURCE_SCHEMA_INLINE) => {
            let mut partitions = Vec::new();
            for _ in 0..r.u32()? {
                let channels = (0..r.u32()?).map(|_| r.channel()).collect::<Result<Vec<_>>>()?;
                partitions.push(channels);
            }
            let schema = if kind == SOURCE_SCHEMA_INLINE {
                StreamReader::try_new(Cursor::new(r.bytes()?), None)?.schema()
            } else {
                let [input] = inputs else {
                    return Err(bad("a source has one input, for its schema"));
                };
                input.schema()
            };
            Ok(Arc::new(StreamExchangeExec::new(schema, partitions)))
        }
        kind => Err(bad(format!("unknown node kind {kind}"))),
    }
}

/// The schema (an Arrow IPC stream of no batch) a source's plan bytes declare inline, as
/// DataFusion encodes a decoded source again (`try_encode`).
pub fn inline_schema(plan: &[u8]) -> Result<Vec<u8>> {
    let extension = field(plan, 18).ok_or_else(|| bad("not an extension node"))?;
    let node = field(extension, 1).ok_or_else(|| bad("an extension node without its node"))?;
    let mut r = Reader(node);
    if r.take(TAG_MAGIC.len())? != TAG_MAGIC || r.bytes()? != CODEC_ID.as_bytes() {
        return Err(bad("not a node of this codec"));
    }
    if r.u8()? != VERSION || r.u8()? != SOURCE_SCHEMA_INLINE {
        return Err(bad("not a source with its schema inline"));
    }
    for _ in 0..r.u32()? {
        for _ in 0..r.u32()? {
            r.channel()?;
        }
    }
    Ok(r.bytes()?.to_vec())
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

/// The bytes of the first length-delimited field `number` of a protobuf message.
fn field(message: &[u8], number: u64) -> Option<&[u8]> {
    let mut at = 0;
    while at < message.len() {
        let key = read_varint(message, &mut at)?;
        match key & 7 {
            0 => {
                read_varint(message, &mut at)?;
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = read_varint(message, &mut at)? as usize;
                let value = message.get(at..at.checked_add(len)?)?;
                if key >> 3 == number {
                    return Some(value);
                }
                at += len;
            }
            _ => return None,
        }
    }
    None
}

/// The wheel's codec-id tag followed by `payload`.
pub fn tagged(payload: &[u8]) -> Vec<u8> {
    let mut out = TAG_MAGIC.to_vec();
    out.extend_from_slice(&(CODEC_ID.len() as u32).to_le_bytes());
    out.extend_from_slice(CODEC_ID.as_bytes());
    out.extend_from_slice(payload);
    out
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn length_delimited(field: u32, bytes: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(field << 3 | 2), out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Plan bytes of an extension node: `PhysicalPlanNode { extension: { node, inputs } }`.
pub fn extension_plan(payload: &[u8], inputs: &[&[u8]]) -> Vec<u8> {
    let mut extension = Vec::new();
    length_delimited(1, &tagged(payload), &mut extension);
    for input in inputs {
        length_delimited(2, input, &mut extension);
    }
    let mut node = Vec::new();
    length_delimited(18, &extension, &mut node);
    node
}

#[derive(Debug)]
pub struct ExchangeCodec;

impl PhysicalExtensionCodec for ExchangeCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        decode(buf, inputs)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(sink) = node.downcast_ref::<ExchangeSinkExec>() {
            buf.extend(sink_payload(&sink.key));
        } else if let Some(source) = node.downcast_ref::<StreamExchangeExec>() {
            buf.extend(source_payload(&source.partitions, Some(&source.schema()))?);
        } else {
            return Err(bad(format!("{} is not an exchange node", node.name())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::ChannelKey;
    use arrow::datatypes::{DataType, Field, Schema};

    fn channel(address: &str, partition: u32) -> ChannelRef {
        let key = ChannelKey {
            query: "q".into(),
            stage: 3,
            task: 1,
            attempt: 2,
            partition,
        };
        ChannelRef {
            address: address.into(),
            key,
        }
    }

    #[test]
    fn a_source_with_its_schema_inline_decodes_to_itself() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Decimal128(27, 2), true)]));
        let partitions = vec![vec![channel("", 0), channel("127.0.0.1:9", 1)], vec![]];
        let payload = source_payload(&partitions, Some(&schema)).unwrap();
        let node = decode(&payload, &[]).unwrap();
        let source = node.downcast_ref::<StreamExchangeExec>().unwrap();
        assert_eq!(source.partitions, partitions);
        assert_eq!(node.schema(), schema);
    }

    #[test]
    fn the_inline_schema_is_read_back_from_plan_bytes() {
        let schema = Arc::new(Schema::new(vec![Field::new("b", DataType::Utf8View, false)]));
        let payload = source_payload(&[vec![channel("", 0)]], Some(&schema)).unwrap();
        let ipc = inline_schema(&extension_plan(&payload, &[])).unwrap();
        assert_eq!(StreamReader::try_new(Cursor::new(ipc), None).unwrap().schema(), schema);
        assert!(inline_schema(b"\x0a\x00").is_err());
    }

    #[test]
    fn a_sink_without_its_child_is_refused() {
        let key = SinkKey {
            query: "q".into(),
            stage: 1,
            task: 0,
            attempt: 0,
        };
        let error = decode(&sink_payload(&key), &[]).unwrap_err().to_string();
        assert!(error.contains("a sink has one input"), "{error}");
    }

    #[test]
    fn a_cut_payload_is_an_error_not_a_panic() {
        let payload = source_payload(&[vec![channel("", 0)]], None).unwrap();
        for end in 0..payload.len() {
            assert!(decode(&payload[..end], &[]).is_err());
        }
    }

    #[test]
    fn extension_plans_nest_the_tagged_payload_and_the_inputs() {
        let plan = extension_plan(b"xy", &[b"child"]);
        let tag_len = TAG_MAGIC.len() + 4 + CODEC_ID.len() + 2;
        assert_eq!(plan[..2], [0x92, 0x01]); // field 18, length-delimited: a two-byte varint
        assert_eq!(plan[3], 1 << 3 | 2);
        assert_eq!(plan[4] as usize, tag_len);
        assert!(plan.ends_with(&[2 << 3 | 2, 5, b'c', b'h', b'i', b'l', b'd']));
    }
}
