//! The view's nodes: listed in name order, looked up by name through a hash.
//!
//! Both are hot: kube-scheduler's search walks every node in order for each pod it places, and the controller's
//! placement looks a node up by name for every candidate it weighs. A B-tree keyed by ~1,500 names that share a
//! long prefix (`openb-node-0123`) compared about sixteen of them per lookup; a sorted list with a hashed position
//! per name answers both. Nodes join and leave rarely, so an insertion that shifts the list is cheap overall.

use std::collections::HashMap;

use super::{Fixed, Node};

#[derive(Clone, Debug, Default)]
pub(super) struct Nodes {
    /// In name order.
    nodes: Vec<Node>,
    /// name → index in `nodes`.
    positions: HashMap<String, usize, Fixed>,
}

impl PartialEq for Nodes {
    fn eq(&self, other: &Self) -> bool {
        // The positions follow from the list.
        self.nodes == other.nodes
    }
}

impl Nodes {
    pub(super) fn get(&self, name: &str) -> Option<&Node> {
        self.positions.get(name).map(|&at| &self.nodes[at])
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.positions.contains_key(name)
    }

    /// In name order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, Node> {
        self.nodes.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Stores `node`, replacing the one of that name in place.
    pub(super) fn insert(&mut self, node: Node) {
        if let Some(&at) = self.positions.get(&node.name) {
            self.nodes[at] = node;
            return;
        }
        let at = self.nodes.partition_point(|stored| stored.name < node.name);
        self.nodes.insert(at, node);
        self.renumber(at);
    }

    pub(super) fn remove(&mut self, name: &str) -> Option<Node> {
        let at = self.positions.remove(name)?;
        let node = self.nodes.remove(at);
        self.renumber(at);
        Some(node)
    }

    /// Positions from `from` on moved: record them again.
    fn renumber(&mut self, from: usize) {
        for (at, node) in self.nodes.iter().enumerate().skip(from) {
            match self.positions.get_mut(node.name.as_str()) {
                Some(position) => *position = at,
                None => {
                    self.positions.insert(node.name.clone(), at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        Node { name: name.to_owned(), ..Node::default() }
    }

    #[test]
    fn nodes_are_listed_in_name_order_and_found_by_name_through_inserts_and_removals() {
        let mut nodes = Nodes::default();
        for name in ["gpu-3", "gpu-1", "gpu-4", "gpu-2", "gpu-0"] {
            nodes.insert(node(name));
        }
        let names = |nodes: &Nodes| nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&nodes), ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4"]);
        let mut replaced = node("gpu-2");
        replaced.unschedulable = true;
        nodes.insert(replaced);
        assert_eq!(nodes.len(), 5, "a node of the same name is replaced, not added");
        assert!(nodes.get("gpu-2").unwrap().unschedulable);
        assert_eq!(nodes.remove("gpu-1").map(|n| n.name), Some("gpu-1".to_owned()));
        assert_eq!(nodes.remove("gpu-1"), None);
        assert_eq!(names(&nodes), ["gpu-0", "gpu-2", "gpu-3", "gpu-4"]);
        for name in ["gpu-0", "gpu-2", "gpu-3", "gpu-4"] {
            assert_eq!(nodes.get(name).map(|n| n.name.as_str()), Some(name), "found after the shift");
        }
        assert!(!nodes.contains("gpu-1") && nodes.get("gpu-1").is_none());
        nodes.insert(node("gpu-1"));
        assert_eq!(names(&nodes), ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4"]);
        assert_eq!(nodes.get("gpu-4").map(|n| n.name.as_str()), Some("gpu-4"));
    }
}
