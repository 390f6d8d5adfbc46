//! Reading Kubernetes resource quantities (`"100m"`, `"17Gi"`, `"1.5e6"`) as exact integers the rules can compare.
//!
//! The string form is that of `k8s.io/apimachinery/pkg/api/resource.Quantity`: an optional sign, decimal digits with
//! an optional point, then a binary SI suffix (`Ki` … `Ei`), a decimal SI suffix (`n u m k M G T P E`, or none) or a
//! decimal exponent (`e3`, `E-3`). The value is kept as its digits and exponents, never as a float, so the engine
//! charges exactly what the apiserver and the scheduler charge, and two nodes that read the same object agree.
//!
//! Where Kubernetes' parser is looser than its own OpenAPI pattern, this follows the pattern: `"-"`, `"."` and `"Ki"`
//! (no digits at all) are refused here, where `ParseQuantity` reads them as zero. Kubernetes also rounds a parsed
//! value up to nano-units, caps binary values at `i64::MAX` and truncates an exponent to 32 bits; values here stay
//! exact and anything beyond `u64::MAX` is an error, so no quantity silently becomes a different number.

/// A string that cannot be read as the number asked for.
///
/// It carries the input so a refusal can quote what the user wrote, and a fixed reason so callers and tests can
/// match on it without parsing prose.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{quantity:?} is not a Kubernetes quantity: {reason}")]
pub struct QuantityError {
    pub quantity: String,
    pub reason: &'static str,
}

const EMPTY: &str = "empty";
const BAD_DIGITS: &str = "bad digits";
const UNKNOWN_SUFFIX: &str = "unknown suffix";
const NEGATIVE: &str = "negative";
const TOO_LARGE: &str = "too large";
const NOT_WHOLE: &str = "not a whole number";

/// The CPU quantity in thousandths of a core, rounded up.
///
/// Rounds up as Kubernetes' `MilliValue` does, so that a request the scheduler charges as one millicore is never
/// counted here as zero.
pub fn cpu_millis(q: &str) -> Result<u64, QuantityError> {
    integer(q, 3, Rounding::Up)
}

/// The quantity as a whole number (of bytes, for memory and storage), rounded up.
///
/// Rounds up as Kubernetes' `Value()` does: `"1.5"` bytes or `"100m"` bytes are charged as whole ones by the
/// scheduler and the kubelet, so the engine must charge them the same way.
pub fn bytes(q: &str) -> Result<u64, QuantityError> {
    integer(q, 0, Rounding::Up)
}

/// The quantity of an extended resource (GPUs), which must be whole.
///
/// Devices cannot be split and Kubernetes refuses fractional requests of extended resources, so a fraction is an
/// error here rather than something to round: rounding would hide a mistake the apiserver would refuse anyway.
pub fn whole_units(q: &str) -> Result<u64, QuantityError> {
    integer(q, 0, Rounding::Exact)
}

/// Thousandths of a core as Kubernetes writes a CPU quantity in canonical form: whole cores (`"2"`) when exact, else
/// millicores (`"1500m"`). [`cpu_millis`] reads it back unchanged.
pub fn cpu_text(millis: u64) -> String {
    match millis % 1000 {
        0 => (millis / 1000).to_string(),
        _ => format!("{millis}m"),
    }
}

/// Bytes as Kubernetes writes a memory quantity in canonical form (binary SI): the largest suffix that divides it
/// exactly (`"16Gi"`, `"1536Mi"`), else the plain number. [`bytes`] reads it back unchanged.
pub fn bytes_text(bytes: u64) -> String {
    const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut value, mut suffix) = (bytes, "");
    for next in SUFFIXES {
        if value == 0 || value % 1024 != 0 {
            break;
        }
        (value, suffix) = (value / 1024, next);
    }
    format!("{value}{suffix}")
}

/// What to do with a fraction left after scaling.
#[derive(Clone, Copy)]
enum Rounding {
    Up,
    Exact,
}

/// A quantity as written: `±digits × 2^binary_exponent × 10^decimal_exponent`.
///
/// Digits stay a string of any length so no input, however long, loses precision or overflows before the final
/// conversion decides whether the value fits.
struct Parsed {
    negative: bool,
    /// Digit values (0..=9), most significant first; the decimal point's place is folded into `decimal_exponent`.
    digits: Vec<u8>,
    binary_exponent: u32,
    decimal_exponent: i128,
}

/// Bound on a written exponent's magnitude. No string can have this many digits, so a larger exponent gives the same
/// verdict (too large, or a positive fraction of a unit) and clamping keeps the arithmetic in `i128`.
const EXPONENT_CLAMP: i128 = 1 << 64;

fn integer(q: &str, scale: i128, rounding: Rounding) -> Result<u64, QuantityError> {
    let error = |reason| QuantityError { quantity: q.to_owned(), reason };
    let parsed = parse(q).map_err(error)?;
    if parsed.digits.iter().all(|&d| d == 0) {
        return Ok(0);
    }
    if parsed.negative {
        return Err(error(NEGATIVE));
    }
    let product = times_power_of_two(&parsed.digits, parsed.binary_exponent);
    let significant = &product[product.iter().take_while(|&&d| d == 0).count()..];
    let exponent = parsed.decimal_exponent + scale;
    let (whole, fraction, zeros) = if exponent >= 0 {
        (significant, &[][..], exponent)
    } else {
        let places = -exponent;
        let cut = if places >= significant.len() as i128 { 0 } else { significant.len() - places as usize };
        (&significant[..cut], &significant[cut..], 0)
    };
    let fractional = fraction.iter().any(|&d| d != 0);
    if fractional && matches!(rounding, Rounding::Exact) {
        return Err(error(NOT_WHOLE));
    }
    let whole = to_u64(whole, zeros).ok_or_else(|| error(TOO_LARGE))?;
    whole.checked_add(u64::from(fractional)).ok_or_else(|| error(TOO_LARGE))
}

fn parse(q: &str) -> Result<Parsed, &'static str> {
    let (negative, rest) = match q.as_bytes().split_first() {
        None => return Err(EMPTY),
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        Some(_) => (false, q.as_bytes()),
    };
    let (int, rest) = split_digits(rest);
    let (frac, rest) = match rest.split_first() {
        Some((b'.', after)) => split_digits(after),
        _ => (&[][..], rest),
    };
    if (int.is_empty() && frac.is_empty()) || rest.first() == Some(&b'.') {
        return Err(BAD_DIGITS);
    }
    let (binary_exponent, suffix_exponent) = suffix(rest).ok_or(UNKNOWN_SUFFIX)?;
    Ok(Parsed {
        negative,
        digits: int.iter().chain(frac).map(|b| b - b'0').collect(),
        binary_exponent,
        decimal_exponent: suffix_exponent - frac.len() as i128,
    })
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    s.split_at(s.iter().take_while(|b| b.is_ascii_digit()).count())
}

/// The suffix as `(power of two, power of ten)`.
fn suffix(s: &[u8]) -> Option<(u32, i128)> {
    let pair = match s {
        b"n" => (0, -9),
        b"u" => (0, -6),
        b"m" => (0, -3),
        b"" => (0, 0),
        b"k" => (0, 3),
        b"M" => (0, 6),
        b"G" => (0, 9),
        b"T" => (0, 12),
        b"P" => (0, 15),
        b"E" => (0, 18),
        b"Ki" => (10, 0),
        b"Mi" => (20, 0),
        b"Gi" => (30, 0),
        b"Ti" => (40, 0),
        b"Pi" => (50, 0),
        b"Ei" => (60, 0),
        [b'e' | b'E', exponent @ ..] => (0, decimal_exponent(exponent)?),
        _ => return None,
    };
    Some(pair)
}

/// The signed integer after `e`/`E`; Kubernetes takes no point or second suffix there.
fn decimal_exponent(s: &[u8]) -> Option<i128> {
    let (negative, digits) = match s {
        [b'-', digits @ ..] => (true, digits),
        [b'+', digits @ ..] => (false, digits),
        digits => (false, digits),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().fold(0, |acc: i128, d| (acc * 10 + i128::from(d - b'0')).min(EXPONENT_CLAMP));
    Some(if negative { -magnitude } else { magnitude })
}

/// `digits × 2^exponent` as digits, by schoolbook multiplication: binary suffixes with a fraction (`"1.5Ki"`) are
/// only whole after the multiplication, so it has to be exact on the full digit string.
fn times_power_of_two(digits: &[u8], exponent: u32) -> Vec<u8> {
    let multiplier = 1u128 << exponent;
    let mut product = Vec::with_capacity(digits.len() + 20);
    let mut carry = 0u128;
    for &d in digits.iter().rev() {
        let v = u128::from(d) * multiplier + carry;
        product.push((v % 10) as u8);
        carry = v / 10;
    }
    while carry > 0 {
        product.push((carry % 10) as u8);
        carry /= 10;
    }
    product.reverse();
    product
}

/// `digits` followed by `zeros` zeros, if that fits in a u64. `digits` has no leading zeros.
fn to_u64(digits: &[u8], zeros: i128) -> Option<u64> {
    if digits.is_empty() {
        return Some(0);
    }
    // u64::MAX has 20 digits, and 10^20 still fits in u128.
    if digits.len() as i128 + zeros > 20 {
        return None;
    }
    let value = digits.iter().fold(0u128, |acc, &d| acc * 10 + u128::from(d)) * 10u128.pow(zeros as u32);
    u64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn canonical_text_reads_back_as_the_same_quantity() {
        assert_eq!(cpu_text(2000), "2");
        assert_eq!(cpu_text(1500), "1500m");
        assert_eq!(cpu_text(0), "0");
        assert_eq!(bytes_text(16 << 30), "16Gi");
        assert_eq!(bytes_text(1536 << 20), "1536Mi");
        assert_eq!(bytes_text(1500), "1500");
        assert_eq!(bytes_text(0), "0");
        for millis in [0, 1, 999, 1000, 1001, 64_000, u64::MAX / 1000 * 1000] {
            assert_eq!(cpu_millis(&cpu_text(millis)), Ok(millis), "{millis}");
        }
        for value in [0, 1, 1023, 1024, 1025, 3 << 40, 7 << 60, u64::MAX] {
            assert_eq!(bytes(&bytes_text(value)), Ok(value), "{value}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    fn reason<T: std::fmt::Debug>(result: Result<T, QuantityError>) -> &'static str {
        result.unwrap_err().reason
    }

    #[test]
    fn cpu_reads_millicores_cores_and_fractions_of_cores() {
        assert_eq!(cpu_millis("100m"), Ok(100));
        assert_eq!(cpu_millis("4"), Ok(4000));
        assert_eq!(cpu_millis("0.5"), Ok(500));
        assert_eq!(cpu_millis(".5"), Ok(500));
        assert_eq!(cpu_millis("5."), Ok(5000));
        assert_eq!(cpu_millis("1.25"), Ok(1250));
        assert_eq!(cpu_millis("+2"), Ok(2000));
        assert_eq!(cpu_millis("0"), Ok(0));
    }

    #[test]
    fn cpu_rounds_a_fraction_of_a_millicore_up() {
        assert_eq!(cpu_millis("1u"), Ok(1));
        assert_eq!(cpu_millis("1n"), Ok(1));
        assert_eq!(cpu_millis("2.0001"), Ok(2001));
        assert_eq!(cpu_millis("1000000n"), Ok(1));
        assert_eq!(cpu_millis("1000001n"), Ok(2));
        assert_eq!(cpu_millis("0.1m"), Ok(1));
        assert_eq!(cpu_millis("1e-100"), Ok(1));
    }

    #[test]
    fn cpu_reads_every_decimal_suffix() {
        assert_eq!(cpu_millis("3000000n"), Ok(3));
        assert_eq!(cpu_millis("3000u"), Ok(3));
        assert_eq!(cpu_millis("3m"), Ok(3));
        assert_eq!(cpu_millis("3"), Ok(3_000));
        assert_eq!(cpu_millis("3k"), Ok(3_000_000));
        assert_eq!(cpu_millis("3M"), Ok(3_000_000_000));
        assert_eq!(cpu_millis("3G"), Ok(3_000_000_000_000));
        assert_eq!(cpu_millis("3T"), Ok(3_000_000_000_000_000));
        assert_eq!(cpu_millis("3P"), Ok(3_000_000_000_000_000_000));
        assert_eq!(reason(cpu_millis("1E")), TOO_LARGE);
        assert_eq!(cpu_millis("0.001E"), Ok(1_000_000_000_000_000_000));
    }

    #[test]
    fn cpu_reads_every_binary_suffix() {
        assert_eq!(cpu_millis("1Ki"), Ok(1_024_000));
        assert_eq!(cpu_millis("1Mi"), Ok(1_048_576_000));
        assert_eq!(cpu_millis("1Gi"), Ok(1_073_741_824_000));
        assert_eq!(cpu_millis("1Ti"), Ok(1_099_511_627_776_000));
        assert_eq!(cpu_millis("1Pi"), Ok(1_125_899_906_842_624_000));
        assert_eq!(reason(cpu_millis("1Ei")), TOO_LARGE);
    }

    #[test]
    fn bytes_read_the_examples_kubernetes_users_write() {
        assert_eq!(bytes("17Gi"), Ok(18_253_611_008));
        assert_eq!(bytes("50M"), Ok(50_000_000));
        assert_eq!(bytes("4555014145"), Ok(4_555_014_145));
        assert_eq!(bytes("1.5Ki"), Ok(1536));
        assert_eq!(bytes("100m"), Ok(1));
        assert_eq!(bytes("129e6"), Ok(129_000_000));
        assert_eq!(bytes("123Mi"), Ok(128_974_848));
    }

    #[test]
    fn bytes_read_every_suffix() {
        assert_eq!(bytes("2n"), Ok(1));
        assert_eq!(bytes("2u"), Ok(1));
        assert_eq!(bytes("2m"), Ok(1));
        assert_eq!(bytes("2"), Ok(2));
        assert_eq!(bytes("2k"), Ok(2_000));
        assert_eq!(bytes("2M"), Ok(2_000_000));
        assert_eq!(bytes("2G"), Ok(2_000_000_000));
        assert_eq!(bytes("2T"), Ok(2_000_000_000_000));
        assert_eq!(bytes("2P"), Ok(2_000_000_000_000_000));
        assert_eq!(bytes("2E"), Ok(2_000_000_000_000_000_000));
        assert_eq!(bytes("2Ki"), Ok(2 << 10));
        assert_eq!(bytes("2Mi"), Ok(2 << 20));
        assert_eq!(bytes("2Gi"), Ok(2 << 30));
        assert_eq!(bytes("2Ti"), Ok(2 << 40));
        assert_eq!(bytes("2Pi"), Ok(2 << 50));
        assert_eq!(bytes("2Ei"), Ok(2 << 60));
    }

    #[test]
    fn bytes_round_a_fraction_up_even_after_a_binary_suffix() {
        assert_eq!(bytes("1.5"), Ok(2));
        assert_eq!(bytes("0.0001Ki"), Ok(1));
        assert_eq!(bytes("0.001Ki"), Ok(2));
        assert_eq!(bytes("1.0009765625Ki"), Ok(1025));
        assert_eq!(bytes("1.00097656251Ki"), Ok(1026));
        assert_eq!(bytes("0.5Ei"), Ok(1 << 59));
    }

    #[test]
    fn bytes_reach_u64_max_and_no_further() {
        assert_eq!(bytes("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(bytes("000018446744073709551615"), Ok(u64::MAX));
        assert_eq!(reason(bytes("18446744073709551616")), TOO_LARGE);
        assert_eq!(reason(bytes("18446744073709551615.5")), TOO_LARGE);
        assert_eq!(bytes("15Ei"), Ok(15 << 60));
        assert_eq!(reason(bytes("16Ei")), TOO_LARGE);
        assert_eq!(bytes("18E"), Ok(18_000_000_000_000_000_000));
        assert_eq!(reason(bytes("19E")), TOO_LARGE);
        assert_eq!(reason(bytes("100000000000000000000000000000000000000000000Ki")), TOO_LARGE);
    }

    #[test]
    fn exponents_scale_by_powers_of_ten_in_either_direction() {
        assert_eq!(bytes("1e3"), Ok(1_000));
        assert_eq!(bytes("1E3"), Ok(1_000));
        assert_eq!(bytes("1e+3"), Ok(1_000));
        assert_eq!(bytes("1e0"), Ok(1));
        assert_eq!(bytes("1.5e6"), Ok(1_500_000));
        assert_eq!(bytes("1e007"), Ok(10_000_000));
        assert_eq!(cpu_millis("12E-3"), Ok(12));
        assert_eq!(bytes("12E-3"), Ok(1));
        assert_eq!(bytes("1e19"), Ok(10_000_000_000_000_000_000));
        assert_eq!(reason(bytes("1e20")), TOO_LARGE);
        assert_eq!(bytes("0.00000000000000000001e36"), Ok(10_000_000_000_000_000));
    }

    #[test]
    fn exponents_beyond_any_machine_integer_stay_exact() {
        assert_eq!(reason(bytes("1e99999999999999999999999999999999999999999")), TOO_LARGE);
        assert_eq!(bytes("1e-99999999999999999999999999999999999999999"), Ok(1));
        assert_eq!(bytes("0e99999999999999999999999999999999999999999"), Ok(0));
        assert_eq!(reason(bytes("1e4294967296")), TOO_LARGE);
        assert_eq!(reason(whole_units("1e-99999999999999999999999999999999999999999")), NOT_WHOLE);
    }

    #[test]
    fn whole_units_take_integers_with_any_suffix_that_keeps_them_whole() {
        assert_eq!(whole_units("4"), Ok(4));
        assert_eq!(whole_units("1k"), Ok(1000));
        assert_eq!(whole_units("2e0"), Ok(2));
        assert_eq!(whole_units("2000m"), Ok(2));
        assert_eq!(whole_units("3000000000n"), Ok(3));
        assert_eq!(whole_units("1.5k"), Ok(1500));
        assert_eq!(whole_units("0.5Ki"), Ok(512));
        assert_eq!(whole_units("20E-1"), Ok(2));
        assert_eq!(whole_units("0"), Ok(0));
        assert_eq!(whole_units("0.0"), Ok(0));
    }

    #[test]
    fn whole_units_refuse_any_fraction_however_small() {
        for q in ["1500m", "1.5", "1u", "1n", "0.1", "1.0000000000000000000000001", "12E-3", "1.9999999999"] {
            assert_eq!(reason(whole_units(q)), NOT_WHOLE, "{q}");
        }
    }

    #[test]
    fn zero_is_zero_whatever_its_sign_or_suffix() {
        for q in ["0", "-0", "+0", "0.000", "-0.0m", "0Ei", "0E", "0e-5", ".0", "0."] {
            assert_eq!(cpu_millis(q), Ok(0), "{q}");
            assert_eq!(bytes(q), Ok(0), "{q}");
            assert_eq!(whole_units(q), Ok(0), "{q}");
        }
    }

    #[test]
    fn negative_values_are_refused_by_every_helper() {
        for q in ["-1", "-100m", "-0.000001", "-1Gi", "-1e3", "-1e-99"] {
            assert_eq!(reason(cpu_millis(q)), NEGATIVE, "{q}");
            assert_eq!(reason(bytes(q)), NEGATIVE, "{q}");
            assert_eq!(reason(whole_units(q)), NEGATIVE, "{q}");
        }
    }

    #[test]
    fn malformed_strings_name_what_is_wrong() {
        assert_eq!(reason(bytes("")), EMPTY);
        for q in ["-", "+", ".", "-.", "Ki", "m", "e3", "1.2.3", "1..5", "--1", "+-1", " 1", "٣"] {
            assert_eq!(reason(bytes(q)), BAD_DIGITS, "{q}");
        }
        for q in ["1.5x", "1 ", "1K", "1ki", "1iK", "1KiB", "1mi", "1e", "1e+", "1e-", "1e1.5", "1Ee3", "1e3k", "1é"] {
            assert_eq!(reason(bytes(q)), UNKNOWN_SUFFIX, "{q}");
        }
    }

    #[test]
    fn the_error_quotes_the_input_and_gives_the_reason() {
        assert_eq!(
            cpu_millis("1.5x").unwrap_err().to_string(),
            "\"1.5x\" is not a Kubernetes quantity: unknown suffix"
        );
        assert_eq!(
            whole_units("1500m").unwrap_err().to_string(),
            "\"1500m\" is not a Kubernetes quantity: not a whole number"
        );
        let error = bytes("16Ei").unwrap_err();
        assert_eq!(error, QuantityError { quantity: "16Ei".to_owned(), reason: TOO_LARGE });
        let _: &dyn std::error::Error = &error;
    }

    proptest! {
        #[test]
        fn no_string_makes_a_helper_panic(q in "\\PC*") {
            let _ = cpu_millis(&q);
            let _ = bytes(&q);
            let _ = whole_units(&q);
        }

        #[test]
        fn no_quantity_shaped_string_makes_a_helper_panic(
            q in "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,25})?"
        ) {
            let _ = cpu_millis(&q);
            let _ = bytes(&q);
            let _ = whole_units(&q);
        }

        #[test]
        fn every_u64_reads_back_as_itself(n in any::<u64>()) {
            prop_assert_eq!(whole_units(&n.to_string()), Ok(n));
            prop_assert_eq!(bytes(&n.to_string()), Ok(n));
            prop_assert_eq!(cpu_millis(&format!("{n}m")), Ok(n));
        }

        #[test]
        fn millis_as_bytes_round_up_to_the_next_whole(n in any::<u64>()) {
            prop_assert_eq!(bytes(&format!("{n}m")), Ok(n.div_ceil(1000)));
        }

        #[test]
        fn binary_suffixes_multiply_exactly(n in 0u64..(1 << 24), power in 1u32..=4) {
            let suffix = ["Ki", "Mi", "Gi", "Ti"][power as usize - 1];
            prop_assert_eq!(bytes(&format!("{n}{suffix}")), Ok(n << (10 * power)));
        }

        #[test]
        fn an_exponent_equals_its_zeros(n in 0u64..1_000_000, zeros in 0usize..12) {
            let written = format!("{n}{}", "0".repeat(zeros));
            prop_assert_eq!(bytes(&format!("{n}e{zeros}")), bytes(&written));
        }
    }
}
