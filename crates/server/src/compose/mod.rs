//! Composing replies: the connection's output (`output`, with direct
//! writes from item memory), where its responses start over UDP
//! (`udp_marks`), and one reply encoder per protocol (`text`, `meta`,
//! `binary`). Nothing here touches the store's state or counts stats: the
//! executor decides what happened, the encoders write it.

pub mod binary;
pub mod meta;
pub mod output;
pub mod text;
pub mod udp_marks;
