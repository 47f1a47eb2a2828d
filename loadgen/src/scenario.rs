//! What a run does: the scenario (`--scenario`), the REST operations it sends, and the role of
//! each lane (`--producers`, `--consumers`). A lane is one sequential stream of requests on a
//! connection (a connection with `--pipeline N` carries N lanes); how a lane moves from request
//! to request is the engine's (`engine/lane.rs`).

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Every lane puts.
    Put,
    /// Every lane gets messages and deletes each one.
    GetDelete,
    /// Every lane gets messages and leaves them leased: they come back after the visibility
    /// timeout. Measures Get Messages alone (`--batch 32` is the Get(32) benchmark).
    Get,
    /// Every lane peeks.
    Peek,
    /// Every lane gets, updates each message to extend its lease, then deletes it.
    Update,
    /// Producer lanes put and consumer lanes get and delete, on the same queues.
    Mixed,
    /// Producers put (at `--rate`, or as fast as they can); workers get a batch, process each
    /// message for `--work-time`, then delete it, backing off on an empty queue: the worker
    /// fleet a capacity plan is about.
    Workers,
}

impl Scenario {
    /// Parses a `--scenario` value.
    pub fn parse(text: &str) -> Option<Scenario> {
        Some(match text {
            "put" => Scenario::Put,
            "get-delete" => Scenario::GetDelete,
            "get" => Scenario::Get,
            "peek" => Scenario::Peek,
            "update" => Scenario::Update,
            "mixed" => Scenario::Mixed,
            "workers" => Scenario::Workers,
            _ => return None,
        })
    }

    /// The `--scenario` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Put => "put",
            Scenario::GetDelete => "get-delete",
            Scenario::Get => "get",
            Scenario::Peek => "peek",
            Scenario::Update => "update",
            Scenario::Mixed => "mixed",
            Scenario::Workers => "workers",
        }
    }

    /// The operations the scenario sends, in report order. With `refill`, consumers also put.
    pub fn operations(self, refill: bool) -> &'static [Operation] {
        match (self, refill) {
            (Scenario::Put, _) => &[Operation::Put],
            (Scenario::GetDelete, false) => &[Operation::Get, Operation::Delete],
            (Scenario::Get, _) => &[Operation::Get],
            (Scenario::Peek, _) => &[Operation::Peek],
            (Scenario::Update, false) => &[Operation::Get, Operation::Update, Operation::Delete],
            (Scenario::Update, true) => &[
                Operation::Put,
                Operation::Get,
                Operation::Update,
                Operation::Delete,
            ],
            (Scenario::Mixed | Scenario::Workers, _) | (Scenario::GetDelete, true) => {
                &[Operation::Put, Operation::Get, Operation::Delete]
            }
        }
    }

    /// Whether the scenario consumes messages, so that end-to-end latency and queue depth over
    /// time are worth measuring.
    pub fn consumes(self) -> bool {
        matches!(
            self,
            Scenario::GetDelete | Scenario::Update | Scenario::Mixed | Scenario::Workers
        )
    }

    /// Whether some lanes put and others consume (`--producers`, `--consumers`).
    pub fn has_producers_and_consumers(self) -> bool {
        matches!(self, Scenario::Mixed | Scenario::Workers)
    }
}

/// The REST operations the scenarios send, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Put,
    Get,
    Peek,
    Update,
    Delete,
}

impl Operation {
    /// Every operation, in the order reports list them.
    pub const ALL: [Operation; 5] = [
        Operation::Put,
        Operation::Get,
        Operation::Peek,
        Operation::Update,
        Operation::Delete,
    ];

    /// The key in reports and the tag in the HdrHistogram log.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Put => "put",
            Operation::Get => "get",
            Operation::Peek => "peek",
            Operation::Update => "update",
            Operation::Delete => "delete",
        }
    }

    /// Position in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// What one lane does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Producer,
    Consumer,
    /// Gets messages and keeps nothing: no Delete follows.
    Getter,
    Peeker,
    Updater,
    /// Gets messages, works on each, then deletes it (or abandons it: a crash).
    Worker,
}

/// The roles of `lanes` lanes for `scenario`. For `mixed` and `workers`, the first `producers`
/// lanes produce and the rest consume.
pub fn roles(scenario: Scenario, lanes: usize, producers: usize) -> Vec<Role> {
    (0..lanes)
        .map(|lane| match scenario {
            Scenario::Put => Role::Producer,
            Scenario::GetDelete => Role::Consumer,
            Scenario::Get => Role::Getter,
            Scenario::Peek => Role::Peeker,
            Scenario::Update => Role::Updater,
            Scenario::Mixed | Scenario::Workers if lane < producers => Role::Producer,
            Scenario::Mixed => Role::Consumer,
            Scenario::Workers => Role::Worker,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_per_scenario() {
        assert_eq!(
            roles(Scenario::Mixed, 5, 2),
            vec![
                Role::Producer,
                Role::Producer,
                Role::Consumer,
                Role::Consumer,
                Role::Consumer
            ]
        );
        assert_eq!(roles(Scenario::Peek, 2, 0), vec![Role::Peeker; 2]);
        assert_eq!(roles(Scenario::Get, 2, 0), vec![Role::Getter; 2]);
        for name in ["put", "get-delete", "peek", "update", "mixed"] {
            assert_eq!(Scenario::parse(name).map(Scenario::name), Some(name));
        }
        assert_eq!(Scenario::parse("delete"), None);
    }
}
