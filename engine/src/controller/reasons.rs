//! Why a pod or a claim waits: an enum whose reason word and message are stable, written as conditions.
//!
//! Messages name what the waiter needs, never figures that other waiters change (units bound or free right now):
//! a condition is rewritten only when the situation changes, so passes do not churn writes.

use std::fmt;

use crate::keys;
use crate::model::{self, Reason};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The pod's VMI is gone or is another run.
    VmiMissing {
        vmi: String,
    },
    /// A claims pod without the attachments annotation (its VMI never passed the VMI webhook): the pod webhook's
    /// word.
    MissingAttachments,
    /// The attachments annotation lists nothing.
    NoClaims,
    MalformedAttachments {
        detail: String,
    },
    ClassMissing {
        class: String,
    },
    ClaimMissing {
        claim: String,
    },
    ClaimDeleting {
        claim: String,
    },
    ClaimInUse {
        claim: String,
        vmi: String,
    },
    /// A template claim of the same name still belongs to the previous run of the VM.
    PreviousRunReleasing {
        claim: String,
    },
    HeldClaimsOnDifferentNodes {
        first: String,
        second: String,
    },
    /// The budget counts the units bound; the message leaves them out (other waiters move them).
    BudgetExceeded {
        class: String,
        units: u64,
        budget: u64,
    },
    NotEntitled(model::NotEntitled),
    /// More units of one class than any node has: no amount of waiting helps.
    NeverFits {
        class: String,
        units: u64,
        largest: u64,
    },
    /// No node has the units together with what the pod needs; retried when capacity changes.
    NoCapacity {
        detail: String,
    },
    /// The class has the units free in total on its nodes, but no one node has them: `free` in total, at most
    /// `largest` on one node, as when the waiter began to wait for this reason (a condition is not rewritten for its
    /// figures alone; the class's status has them now).
    Fragmented {
        class: String,
        units: u64,
        free: u64,
        largest: u64,
    },
    /// The node the set is bound to cannot take the pod now.
    NodeUnfit {
        node: String,
        detail: String,
    },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Wait::*;
        match self {
            VmiMissing { vmi } => write!(f, "VMI {vmi:?} of this pod is gone"),
            MissingAttachments => write!(
                f,
                "the pod carries label {} but no annotation {}: its VMI was not admitted by the GPU claims webhook",
                keys::LABEL_CLAIMS,
                keys::ANNOTATION_ATTACHMENTS
            ),
            NoClaims => write!(f, "the pod lists no GPU claims"),
            MalformedAttachments { detail } => write!(f, "the attachments annotation cannot be read: {detail}"),
            ClassMissing { class } => write!(f, "GPU class {class:?} does not exist"),
            ClaimMissing { claim } => write!(f, "GPU claim {claim:?} does not exist (or is another claim now)"),
            ClaimDeleting { claim } => write!(f, "GPU claim {claim:?} is being deleted"),
            ClaimInUse { claim, vmi } => write!(f, "GPU claim {claim:?} is in use by VMI {vmi:?}"),
            PreviousRunReleasing { claim } => {
                write!(f, "template claim {claim:?} of the previous run is still being released")
            }
            HeldClaimsOnDifferentNodes { first, second } => {
                write!(f, "held GPU claims are bound to different nodes ({first:?} and {second:?})")
            }
            BudgetExceeded { class, units, budget } => {
                write!(f, "{units} more units of GPU class {class:?} would exceed the namespace's budget of {budget}")
            }
            Self::NotEntitled(refused) => refused.fmt(f),
            NeverFits { class, units, largest } => {
                write!(f, "{units} units of GPU class {class:?} can never fit: no node has more than {largest}")
            }
            NoCapacity { detail } => write!(f, "waiting for capacity: {detail}"),
            Fragmented { class, units, free, largest } => write!(
                f,
                "{}{free} units are free in total, at most {largest} on one node",
                fragmented_prefix(class, *units)
            ),
            NodeUnfit { node, detail } => write!(f, "node {node:?} holds the claims but cannot take the pod: {detail}"),
        }
    }
}

impl Wait {
    pub fn reason(&self) -> &'static str {
        use Wait::*;
        match self {
            VmiMissing { .. } => "VMIMissing",
            MissingAttachments => "MissingAttachments",
            NoClaims => "NoClaims",
            MalformedAttachments { .. } => "MalformedAttachments",
            ClassMissing { .. } => "ClassMissing",
            ClaimMissing { .. } => "ClaimMissing",
            ClaimDeleting { .. } => "ClaimDeleting",
            ClaimInUse { .. } => "ClaimInUse",
            PreviousRunReleasing { .. } => "PreviousRunReleasing",
            HeldClaimsOnDifferentNodes { .. } => "HeldClaimsOnDifferentNodes",
            BudgetExceeded { .. } => model::BudgetExceeded::REASON,
            Self::NotEntitled(_) => model::NotEntitled::REASON,
            NeverFits { .. } => "NeverFits",
            NoCapacity { .. } => "NoCapacity",
            Fragmented { .. } => "Fragmented",
            NodeUnfit { .. } => "NodeUnfit",
        }
    }

    pub fn to_reason(&self) -> Reason {
        Reason { reason: self.reason().to_owned(), message: self.to_string() }
    }

    /// The condition to record for this wait where `recorded` is recorded: the recorded one when it says the same
    /// (a `Fragmented` condition for the same class and units keeps the figures it was written with: other waiters
    /// move them at every placement, and a condition rewritten for them alone would be a write per waiter per pass).
    pub fn to_reason_over(&self, recorded: Option<&Reason>) -> Reason {
        if let (Wait::Fragmented { class, units, .. }, Some(recorded)) = (self, recorded)
            && recorded.reason == self.reason()
            && recorded.message.starts_with(&fragmented_prefix(class, *units))
        {
            return recorded.clone();
        }
        self.to_reason()
    }
}

/// The part of a `Fragmented` message that names what the waiter needs.
fn fragmented_prefix(class: &str, units: u64) -> String {
    format!("{units} units of GPU class {class:?} wait for one node to have them: ")
}

impl From<model::BudgetExceeded> for Wait {
    /// Without the units counted: the bound units move with other waiters, and a waiter refused again for the same
    /// budget waits for the same reason (see `controller::waiting`).
    fn from(refused: model::BudgetExceeded) -> Self {
        Wait::BudgetExceeded { class: refused.class, units: refused.units, budget: refused.budget }
    }
}
