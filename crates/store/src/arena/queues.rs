//! What `stats items` shows of S3-FIFO's queues: how many linked items
//! each queue's segments hold (`Segment::live_items`), and which of its
//! segments hold its oldest items (the store walks them for the oldest
//! access time).

use super::*;

/// The figures of one queue.
#[derive(Debug, Default, Clone)]
pub struct QueueFigures {
    /// Linked items in its segments.
    pub items: u64,
    /// Its oldest segments holding linked items, oldest first, each with
    /// its sequence number (to tell whether it was reused meanwhile).
    pub oldest: Vec<(SegmentId, u64)>,
}

impl Arena {
    /// The figures of small (`[0]`) and main (`[1]`): up to `oldest`
    /// segments each, in FIFO order (sealed segments), then the segments
    /// still being written, in activation order.
    pub fn queue_figures(&self, oldest: usize) -> [QueueFigures; 2] {
        let pool = self.pool.lock();
        let mut out: [QueueFigures; 2] = Default::default();
        let mut open: [Vec<(u64, SegmentId)>; 2] = Default::default();
        for (id, s) in self.segments[..pool.next_fresh as usize].iter().enumerate() {
            let state = s.state.load(Ordering::Acquire);
            if state == STATE_FREE {
                continue;
            }
            let q = self.queue(id as SegmentId) as usize;
            let n = s.live_items();
            out[q].items += n;
            if n > 0 && state == STATE_ACTIVE {
                open[q].push((s.seq.load(Ordering::Acquire), id as SegmentId));
            }
        }
        for q in 0..2 {
            open[q].sort_unstable();
            let sealed = pool.fifo[q]
                .iter()
                .map(|&seg| (seg, self.segment(seg).seq.load(Ordering::Acquire)));
            let active = open[q].iter().map(|&(seq, seg)| (seg, seq));
            out[q].oldest = sealed
                .chain(active)
                .filter(|&(seg, _)| self.segment(seg).live_items() > 0)
                .take(oldest)
                .collect();
        }
        out
    }
}
