//! One macro for the open code types of the wire: a newtype over the raw
//! field value with a named constant per known code. "Open" means every raw
//! value is representable (an unknown opcode or reason is kept, never a
//! panic); the connection decides what an unknown value earns.
//!
//! [`open_enum!`] generates, for each type:
//! - `pub struct Name(pub Raw)` deriving `Debug` (printed as `Name(raw)`,
//!   as logs and test messages show it), `Clone`, `Copy`, `PartialEq`, `Eq`,
//!   `Hash`, plus any attributes given before the struct;
//! - one `pub const` per known code;
//! - `KNOWN`, the table of (constant, name) pairs, and `name()`, which gives
//!   the constant's name of a known value and `None` for any other;
//! - `From<Raw> for Name` and `From<Name> for Raw`.

/// Defines an open code type; see the module documentation.
///
/// ```ignore
/// open_enum! {
///     /// Doc of the type.
///     #[derive(PartialOrd, Ord)]
///     pub struct Stage(u8) {
///         /// Doc of the constant.
///         SECURITY = 0,
///         OPERATIONAL = 1,
///     }
/// }
/// ```
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($raw:ty) {
            $(
                $(#[$cmeta:meta])*
                $konst:ident = $value:expr
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub $raw);

        impl $name {
            $(
                $(#[$cmeta])*
                pub const $konst: $name = $name($value);
            )*

            /// Every named code with its name, in declaration order.
            pub const KNOWN: &'static [($name, &'static str)] =
                &[$(($name::$konst, stringify!($konst))),*];

            /// The name of this code's constant, or `None` for a value
            /// without one.
            pub fn name(self) -> Option<&'static str> {
                Self::KNOWN
                    .iter()
                    .find(|(code, _)| *code == self)
                    .map(|(_, name)| *name)
            }
        }

        impl From<$raw> for $name {
            fn from(raw: $raw) -> $name {
                $name(raw)
            }
        }

        impl From<$name> for $raw {
            fn from(code: $name) -> $raw {
                code.0
            }
        }
    };
}

pub(crate) use open_enum;

#[cfg(test)]
mod tests {
    open_enum! {
        /// A test code.
        pub struct Code(u8) {
            ONE = 1,
            /// Two.
            TWO = 2,
        }
    }

    #[test]
    fn generated_items() {
        assert_eq!(Code::ONE, Code(1));
        assert_eq!(Code::TWO.name(), Some("TWO"));
        assert_eq!(Code(7).name(), None);
        assert_eq!(Code::from(2), Code::TWO);
        assert_eq!(u8::from(Code(9)), 9);
        assert_eq!(format!("{:?}", Code::TWO), "Code(2)");
        assert_eq!(Code::KNOWN.len(), 2);
    }
}
