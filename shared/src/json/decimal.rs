//! The exact value of a JSON number, to tell when serde_json's `f64` lost
//! digits of one.

/// The exact value of a JSON number: `digits` × 10^`exponent`, the digits
/// without leading or trailing zeros (none for zero, whose sign is dropped).
#[derive(Debug)]
pub(super) struct Decimal<'a> {
    negative: bool,
    digits: Vec<&'a [u8]>,
    exponent: i64,
}

impl<'a> Decimal<'a> {
    /// The value of a number as JSON writes it (`-12.50e+3`); `None` when the
    /// text is not such a number or its exponent does not fit an `i64`.
    pub(super) fn parse(text: &'a [u8]) -> Option<Decimal<'a>> {
        let (negative, rest) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, text),
        };
        let mantissa_end = rest
            .iter()
            .position(|b| matches!(b, b'e' | b'E'))
            .unwrap_or(rest.len());
        let (mantissa, exponent) = rest.split_at(mantissa_end);
        let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
            Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
            None => (mantissa, &[][..]),
        };
        let all_digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
        if int.is_empty() || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        let exponent: i128 = match exponent.split_first() {
            None => 0,
            Some((_, e)) => {
                let (sign, e) = match e.split_first() {
                    Some((b'-', e)) => (-1, e),
                    Some((b'+', e)) => (1, e),
                    _ => (1, e),
                };
                if e.is_empty() || !all_digits(e) {
                    return None;
                }
                // Leading zeros never make an exponent overflow.
                let e = &e[e.iter().position(|&b| b != b'0').unwrap_or(e.len())..];
                // Up to 19 digits fit an i128 with room for the adjustments
                // below; more is beyond any i64 exponent.
                let e: i128 = match e.len() {
                    0 => 0,
                    1..=19 => std::str::from_utf8(e).ok()?.parse().ok()?,
                    _ => i128::MAX,
                };
                if e > i128::from(i64::MAX) {
                    // Only zero has such an exponent and a value.
                    let zero = int.iter().chain(frac).all(|&b| b == b'0');
                    return zero.then_some(Decimal::ZERO);
                }
                sign * e
            }
        };
        // The significant digits of int ++ frac, as (up to) two slices.
        let joined = [int, frac];
        let leading = int.iter().chain(frac).take_while(|&&b| b == b'0').count();
        let total = int.len() + frac.len();
        if leading == total {
            return Some(Decimal::ZERO);
        }
        let trailing = int
            .iter()
            .chain(frac)
            .rev()
            .take_while(|&&b| b == b'0')
            .count();
        let (start, end) = (leading, total - trailing);
        let mut digits = Vec::with_capacity(2);
        let mut offset = 0;
        for part in joined {
            let (from, to) = (start.max(offset), end.min(offset + part.len()));
            if from < to {
                digits.push(&part[from - offset..to - offset]);
            }
            offset += part.len();
        }
        // value = int.frac × 10^e = (significant digits) × 10^(e - frac.len() + trailing)
        let exponent = exponent - frac.len() as i128 + trailing as i128;
        Some(Decimal {
            negative,
            digits,
            exponent: i64::try_from(exponent).ok()?,
        })
    }

    const ZERO: Decimal<'static> = Decimal {
        negative: false,
        digits: Vec::new(),
        exponent: 0,
    };

    /// The exact form: `[-]<digits>e<exponent>`, unique for each value and
    /// never a form serde_json prints for a different one (it parses back to
    /// exactly this value).
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        if self.digits.is_empty() {
            out.push(b'0');
            return;
        }
        if self.negative {
            out.push(b'-');
        }
        for part in &self.digits {
            out.extend_from_slice(part);
        }
        out.push(b'e');
        out.extend_from_slice(self.exponent.to_string().as_bytes());
    }
}

impl PartialEq for Decimal<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.negative == other.negative
            && self.exponent == other.exponent
            && self.digits.concat() == other.digits.concat()
    }
}

impl Eq for Decimal<'_> {}
