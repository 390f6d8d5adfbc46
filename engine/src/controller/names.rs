//! Deterministic names of the objects the controller creates, within Kubernetes' 253-character limit.

/// The longest object name Kubernetes accepts (a DNS subdomain).
pub const NAME_LENGTH_MAX: usize = 253;

/// The template claim for the `index`-th claim template of VMI `vmi`: `<vmi>-gpu-<index>`.
pub fn template_claim_name(vmi: &str, index: u32) -> String {
    // Concatenated, not formatted: the checks and the controller name template claims several times per pass.
    bounded([vmi, "-gpu-", itoa::Buffer::new().format(index)].concat())
}

/// A usage record of `claim` for one attachment segment (VMI uid, node, start): `<claim>-<hash>`.
pub fn usage_name(claim: &str, vmi_uid: &str, node: &str, start_millis: i64) -> String {
    let hash = fnv1a(&[vmi_uid.as_bytes(), node.as_bytes(), &start_millis.to_le_bytes()]);
    bounded([claim, "-", hex8(hash as u32).as_str()].concat())
}

/// Cuts a name that is too long and appends a hash of the whole, so distinct long names stay distinct.
fn bounded(name: String) -> String {
    if name.len() <= NAME_LENGTH_MAX {
        return name;
    }
    let hash = fnv1a(&[name.as_bytes()]) as u32;
    let keep = NAME_LENGTH_MAX - 9;
    let mut cut = name[..keep].trim_end_matches(['-', '.']).to_owned();
    cut.push('-');
    cut.push_str(hex8(hash).as_str());
    cut
}

/// `value` as eight lowercase hex digits (`{:08x}`), without the formatting machinery.
fn hex8(value: u32) -> HexDigits {
    let mut digits = [0u8; 8];
    for (index, slot) in digits.iter_mut().enumerate() {
        let nibble = (value >> (28 - 4 * index)) & 0xf;
        *slot = b"0123456789abcdef"[nibble as usize];
    }
    HexDigits(digits)
}

struct HexDigits([u8; 8]);

impl HexDigits {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

/// FNV-1a, 64 bits: stable across platforms and releases (std's hasher is not), which names need.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|part| part.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_bounded() {
        assert_eq!(template_claim_name("trainer", 1), "trainer-gpu-1");
        let long = "v".repeat(300);
        let name = template_claim_name(&long, 0);
        assert!(name.len() <= NAME_LENGTH_MAX);
        assert_ne!(name, template_claim_name(&long, 1));
        assert_eq!(usage_name("train-a", "uid-1", "gpu-1", 0), usage_name("train-a", "uid-1", "gpu-1", 0));
        assert_ne!(usage_name("train-a", "uid-1", "gpu-1", 0), usage_name("train-a", "uid-1", "gpu-2", 0));
        for value in [0, 1, 0xdead_beef, u32::MAX, 0x0123_4567] {
            assert_eq!(hex8(value).as_str(), format!("{value:08x}"));
        }
        // Pinned: a change of hash function renames every record in existing clusters.
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
    }
}
