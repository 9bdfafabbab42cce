//! The data plane between processes: a worker's server hands the channels of its producer
//! tasks to consumers elsewhere, over TCP, as Arrow IPC.
//!
//! A consumer connects and sends one request: magic, the cluster's token, the channel's key.
//! The server answers with frames (kind u8, length u64 LE, bytes): a batch (an Arrow IPC stream
//! of one batch), the producer's error, or the end. A connection that closes before the end
//! frame is a broken stream, never a short one. A consumer that goes away drops its channel,
//! so the producer stops sending.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::channels::{self, ChannelKey, Message, Receiver, CHANNEL_CAPACITY};
use crate::runtime;

const MAGIC: &[u8; 4] = b"DDX1";
const REQUEST_LIMIT: u32 = 64 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const BATCH: u8 = 1;
const FAILED: u8 = 2;
const END: u8 = 3;

static TOKEN: RwLock<String> = RwLock::new(String::new());
/// The tokens of data planes this process reads from that belong to another cluster than the
/// one it serves for (a coordinator reading its workers' streams), by address.
static PEER_TOKENS: LazyLock<RwLock<HashMap<String, String>>> = LazyLock::new(Default::default);

/// The token every request must carry, and this process's requests send.
pub fn set_token(token: &str) {
    *TOKEN.write().unwrap_or_else(|e| e.into_inner()) = token.to_string();
}

/// The token requests to the data plane at `address` send, instead of this process's own.
pub fn set_peer_token(address: &str, token: &str) {
    let mut peers = PEER_TOKENS.write().unwrap_or_else(|e| e.into_inner());
    peers.insert(address.to_string(), token.to_string());
}

fn token() -> String {
    TOKEN.read().unwrap_or_else(|e| e.into_inner()).clone()
}

fn token_for(address: &str) -> String {
    let peers = PEER_TOKENS.read().unwrap_or_else(|e| e.into_inner());
    peers.get(address).cloned().unwrap_or_else(token)
}

fn encode_batch(batch: &RecordBatch) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    let mut writer = StreamWriter::try_new(&mut bytes, &batch.schema()).map_err(std::io::Error::other)?;
    writer.write(batch).map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)?;
    drop(writer);
    Ok(bytes)
}

fn decode_batch(bytes: Vec<u8>) -> std::io::Result<RecordBatch> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(std::io::Error::other)?;
    match reader.next() {
        Some(batch) => batch.map_err(std::io::Error::other),
        None => Err(std::io::Error::other("an empty batch frame")),
    }
}

fn request(key: &ChannelKey, token: &str) -> Vec<u8> {
    let mut body = MAGIC.to_vec();
    for part in [token.as_bytes(), key.query.as_bytes()] {
        body.extend_from_slice(&(part.len() as u32).to_le_bytes());
        body.extend_from_slice(part);
    }
    for n in [key.stage, key.task, key.attempt, key.partition] {
        body.extend_from_slice(&n.to_le_bytes());
    }
    let mut framed = (body.len() as u32).to_le_bytes().to_vec();
    framed.extend(body);
    framed
}

/// The token and channel a request asks for, or why it is refused.
fn parse_request(body: &[u8]) -> Result<(String, ChannelKey), String> {
    let bad = || "a malformed data-plane request".to_string();
    let rest = body.strip_prefix(MAGIC).ok_or_else(bad)?;
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let part = rest.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(part)
    };
    let mut text = || -> Result<String, String> {
        let n = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
        String::from_utf8(take(n)?.to_vec()).map_err(|_| bad())
    };
    let token = text()?;
    let query = text()?;
    let mut numbers = [0u32; 4];
    for n in &mut numbers {
        *n = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?);
    }
    let [stage, task, attempt, partition] = numbers;
    Ok((
        token,
        ChannelKey {
            query,
            stage,
            task,
            attempt,
            partition,
        },
    ))
}

async fn write_frame<W: AsyncWriteExt + Unpin>(out: &mut W, kind: u8, bytes: &[u8]) -> std::io::Result<()> {
    out.write_u8(kind).await?;
    out.write_u64_le(bytes.len() as u64).await?;
    out.write_all(bytes).await
}

/// Serve one consumer: its request, then its channel's frames.
async fn answer(socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let (read, write) = socket.into_split();
    let mut read = BufReader::new(read);
    let mut out = BufWriter::with_capacity(1 << 20, write);
    let length = read.read_u32_le().await?;
    if length > REQUEST_LIMIT {
        return write_frame(&mut out, FAILED, b"a data-plane request too large").await;
    }
    let mut body = vec![0; length as usize];
    read.read_exact(&mut body).await?;
    let receiver = match parse_request(&body) {
        Ok((sent, _)) if sent != token() => Err("the data-plane request carries a wrong token".to_string()),
        Ok((_, key)) => channels::take_receiver(&key),
        Err(error) => Err(error),
    };
    let mut receiver = match receiver {
        Ok(receiver) => receiver,
        Err(error) => {
            write_frame(&mut out, FAILED, error.as_bytes()).await?;
            return out.flush().await;
        }
    };
    loop {
        let message = tokio::select! {
            message = receiver.recv() => message,
            // the consumer sends nothing after its request: a read ends only when it went away,
            // and dropping the receiver then lets the producer stop
            _ = read.read_u8() => return Ok(()),
        };
        let Some(message) = message else { break };
        match message {
            Message::Batch(batch) => write_frame(&mut out, BATCH, &encode_batch(&batch)?).await?,
            Message::Failed(error) => {
                write_frame(&mut out, FAILED, error.as_bytes()).await?;
                break;
            }
            Message::End => {
                write_frame(&mut out, END, &[]).await?;
                break;
            }
        }
        if receiver.is_empty() {
            out.flush().await?; // nothing more at hand: let the consumer have what is buffered
        }
    }
    out.flush().await // a channel closed without its end closes the connection without one
}

/// Start serving this process's channels on `host` (port 0: any free one); the port.
pub fn serve(host: &str, port: u16) -> std::io::Result<u16> {
    let listener = runtime().block_on(TcpListener::bind((host, port)))?;
    let port = listener.local_addr()?.port();
    runtime().spawn(async move {
        loop {
            match listener.accept().await {
                Ok((socket, _)) => {
                    runtime().spawn(async move {
                        let _ = answer(socket).await; // a consumer that went away stops reading
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await, // out of descriptors
            }
        }
    });
    Ok(port)
}

async fn pull(address: &str, key: &ChannelKey, sender: &mpsc::Sender<Message>) -> std::io::Result<()> {
    let socket = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer to connecting"))??;
    socket.set_nodelay(true)?;
    let (read, mut write) = socket.into_split();
    write.write_all(&request(key, &token_for(address))).await?;
    let mut read = BufReader::with_capacity(1 << 20, read);
    loop {
        let kind = tokio::select! {
            kind = read.read_u8() => kind?,
            _ = sender.closed() => return Ok(()), // the reader needs no more: the connection closes
        };
        let length = read.read_u64_le().await? as usize;
        let mut bytes = vec![0; length];
        read.read_exact(&mut bytes).await?;
        let message = match kind {
            BATCH => Message::Batch(decode_batch(bytes)?),
            FAILED => Message::Failed(String::from_utf8_lossy(&bytes).into_owned()),
            END => Message::End,
            _ => return Err(std::io::Error::other(format!("an unknown frame kind {kind}"))),
        };
        let last = !matches!(message, Message::Batch(_));
        if sender.send(message).await.is_err() || last {
            return Ok(()); // the reader stopped (its consumer needs no more), or the stream ended
        }
    }
}

/// A channel fed by the server at `address` with the channel `key` of the producer there.
pub fn fetch(address: &str, key: &ChannelKey) -> Receiver {
    let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
    let (address, key) = (address.to_string(), key.clone());
    runtime().spawn(async move {
        if let Err(error) = pull(&address, &key, &sender).await {
            let what = format!("the stream of {key} from the data plane at {address} broke: {error}");
            let _ = sender.send(Message::Failed(what)).await;
        }
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int32Array;
    use std::sync::Arc;

    fn key(query: &str) -> ChannelKey {
        ChannelKey {
            query: query.into(),
            stage: 2,
            task: 1,
            attempt: 0,
            partition: 3,
        }
    }

    #[test]
    fn a_request_reads_back() {
        set_token("t0ken");
        let framed = request(&key("q-req"), &token());
        let (token, parsed) = parse_request(&framed[4..]).unwrap();
        assert_eq!((token.as_str(), parsed), ("t0ken", key("q-req")));
        assert!(parse_request(&framed[4..framed.len() - 1]).is_err());
    }

    #[test]
    fn batches_cross_the_network_in_order_and_end() {
        set_token("t0ken");
        let port = serve("127.0.0.1", 0).unwrap();
        let k = key("q-net");
        let sender = channels::take_sender(&k).unwrap();
        let mut receiver = fetch(&format!("127.0.0.1:{port}"), &k);
        runtime().block_on(async {
            for n in 0..20 {
                let column = Arc::new(Int32Array::from(vec![n; 100]));
                let batch = RecordBatch::try_from_iter([("n", column as _)]).unwrap();
                sender.send(Message::Batch(batch)).await.unwrap();
            }
            sender.send(Message::End).await.unwrap();
            for n in 0..20 {
                match receiver.recv().await {
                    Some(Message::Batch(batch)) => {
                        let column = batch.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
                        assert_eq!(column.value(99), n);
                    }
                    other => panic!("batch {n}: {other:?}"),
                }
            }
            assert!(matches!(receiver.recv().await, Some(Message::End)));
        });
    }

    #[test]
    fn a_producer_that_dies_is_a_broken_stream() {
        set_token("t0ken");
        let port = serve("127.0.0.1", 0).unwrap();
        let k = key("q-dies");
        let sender = channels::take_sender(&k).unwrap();
        let mut receiver = fetch(&format!("127.0.0.1:{port}"), &k);
        drop(sender);
        match runtime().block_on(receiver.recv()) {
            Some(Message::Failed(error)) => assert!(error.contains("broke"), "{error}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_peer_token_is_sent_to_its_address_only() {
        set_token("t0ken");
        let port = serve("127.0.0.1", 0).unwrap();
        let address = format!("127.0.0.1:{port}");
        set_peer_token(&address, "another cluster's");
        let k = key("q-peer");
        let _sender = channels::take_sender(&k).unwrap();
        match runtime().block_on(fetch(&address, &k).recv()) {
            Some(Message::Failed(error)) => assert!(error.contains("wrong token"), "{error}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(token_for("127.0.0.1:1"), "t0ken");
    }

    #[test]
    fn a_reader_that_goes_away_lets_the_producer_stop() {
        set_token("t0ken");
        let port = serve("127.0.0.1", 0).unwrap();
        let k = key("q-gone");
        let sender = channels::take_sender(&k).unwrap();
        let mut receiver = fetch(&format!("127.0.0.1:{port}"), &k);
        runtime().block_on(async {
            let column = Arc::new(Int32Array::from(vec![1]));
            let batch = RecordBatch::try_from_iter([("n", column as _)]).unwrap();
            sender.send(Message::Batch(batch)).await.unwrap();
            assert!(matches!(receiver.recv().await, Some(Message::Batch(_))));
            drop(receiver);
            tokio::time::timeout(Duration::from_secs(5), sender.closed())
                .await
                .expect("the producer's channel stayed open after its reader left");
        });
    }
}
