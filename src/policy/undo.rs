//! stub
use super::{Policy, PolicyId, PolicyInput, Proposal};
use crate::config::UndoConfig;
pub struct Undo {
    cfg: UndoConfig,
}
impl Undo {
    pub fn new(cfg: UndoConfig) -> Self {
        Undo { cfg }
    }
}
impl Policy for Undo {
    fn id(&self) -> PolicyId {
        PolicyId::Undo
    }
    fn decide(&mut self, _input: &PolicyInput<'_>) -> Vec<Proposal> {
        let _ = &self.cfg;
        Vec::new()
    }
}
