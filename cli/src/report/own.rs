//! A workload's own figures of a row, and the JSON columns they make.
//!
//! Each workload that reports figures beyond the ones every row has (a
//! row's MB/s, latencies, bytes) declares them as a type of its own, with
//! `Option` fields, in its module: `sqlite`'s transactions per second,
//! `fio`'s per-direction figures. A row holds them as [`OwnFigures`]:
//! written once with the workload's type ([`OwnFigures::of`]) and read
//! back with the same type ([`OwnFigures::read`]); nothing else names the
//! fields. The JSON report's rows all have the same keys, in the same
//! order (schema version 1: fields are added, never renamed or moved), so
//! a row's own figures are written as every column of the run's
//! [`OwnColumns`] — every workload's fields, in the order they joined the
//! schema — with `null` for the fields that are another workload's.
//! [`OwnColumns`] come from the catalog, which knows the workloads; this
//! module knows none.

use std::sync::Arc;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A row's figures of its workload's own (empty for a workload without
/// any, or a failed row), and the columns it is written as (see the
/// module's paragraph).
#[derive(Clone, Debug, Default)]
pub struct OwnFigures {
    /// The figures, by field name.
    fields: Map<String, Value>,
    /// The JSON columns, once the report has given them
    /// ([`OwnFigures::in_columns`]).
    columns: Option<OwnColumns>,
}

impl OwnFigures {
    /// The figures of `figures`, a workload's own type (a struct of
    /// `Option` fields).
    pub fn of<T: Serialize>(figures: &T) -> OwnFigures {
        let fields = match serde_json::to_value(figures).expect("own figures serialize") {
            Value::Object(fields) => fields,
            other => panic!("own figures are a struct of fields, not {other}"),
        };
        OwnFigures { fields, columns: None }
    }

    /// The figures as `T`, the type that wrote them: every field `None`
    /// where none was written (a row of another workload, a failed row).
    pub fn read<T: DeserializeOwned + Default>(&self) -> T {
        if self.fields.is_empty() {
            return T::default();
        }
        T::deserialize(&self.fields).unwrap_or_else(|e| panic!("own figures read as another type: {e}"))
    }

    /// The same figures, written as `columns` in the JSON.
    pub fn in_columns(&self, columns: &OwnColumns) -> OwnFigures {
        OwnFigures { fields: self.fields.clone(), columns: Some(columns.clone()) }
    }
}

/// Every row's own columns in the JSON, in their order: the fields of
/// every workload's own figures, each once, in the order they joined the
/// schema.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnColumns(Arc<[String]>);

impl OwnColumns {
    /// The columns of each workload's field names in `fields`, in that
    /// order; a name two workloads share (`db_bytes`) comes once, where it
    /// came first.
    pub fn new<'a>(fields: impl IntoIterator<Item = &'a [String]>) -> OwnColumns {
        let mut columns: Vec<String> = Vec::new();
        for name in fields.into_iter().flatten() {
            if !columns.contains(name) {
                columns.push(name.clone());
            }
        }
        OwnColumns(columns.into())
    }

    /// The columns' names (what the tests compare with schema 1).
    #[cfg(test)]
    pub fn names(&self) -> &[String] {
        &self.0
    }
}

/// The field names of `T`'s figures, in the order it declares them (the
/// order its fields joined the JSON).
pub fn field_names<T: Serialize + Default>() -> Vec<String> {
    // `serde_json`'s maps sort their keys: the order is read back from
    // the text, which keeps the declaration's.
    let text = serde_json::to_string(&T::default()).expect("own figures serialize");
    serde_json::from_str::<FieldOrder>(&text).expect("own figures are a struct of fields").0
}

/// A JSON object's keys, in the order the text gives them.
struct FieldOrder(Vec<String>);

impl<'de> Deserialize<'de> for FieldOrder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = FieldOrder;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FieldOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                    keys.push(key);
                }
                Ok(FieldOrder(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

/// In the JSON, a row's own figures are its columns (`null` where it has
/// none); before the report gives the columns (a row alone), its own
/// fields, by name.
impl Serialize for OwnFigures {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(columns) = &self.columns else { return self.fields.serialize(serializer) };
        for name in self.fields.keys() {
            assert!(
                columns.0.contains(name),
                "own figure {name} is in no JSON column: the catalog does not list its workload"
            );
        }
        let mut map = serializer.serialize_map(Some(columns.0.len()))?;
        for name in columns.0.iter() {
            map.serialize_entry(name, self.fields.get(name).unwrap_or(&Value::Null))?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Serialize, Deserialize, PartialEq, Debug)]
    struct Zebra {
        zebra_mb_s: Option<f64>,
        apple_count: Option<u64>,
    }

    #[derive(Default, Serialize, Deserialize, PartialEq, Debug)]
    struct Other {
        apple_count: Option<u64>,
        label: Option<String>,
    }

    #[test]
    fn fields_keep_their_declared_order_and_shared_names_come_once() {
        assert_eq!(field_names::<Zebra>(), ["zebra_mb_s", "apple_count"]);
        let columns = OwnColumns::new([&field_names::<Zebra>()[..], &field_names::<Other>()[..]]);
        assert_eq!(columns.names(), ["zebra_mb_s", "apple_count", "label"]);
    }

    #[test]
    fn figures_read_back_as_written_and_as_none_by_another_type() {
        let z = Zebra { zebra_mb_s: Some(1.5), apple_count: None };
        let own = OwnFigures::of(&z);
        assert_eq!(own.read::<Zebra>(), z);
        assert_eq!(own.read::<Other>(), Other::default(), "another workload's type reads nothing");
        assert_eq!(OwnFigures::default().read::<Zebra>(), Zebra::default());
    }

    #[test]
    fn in_columns_every_column_is_written_null_where_absent() {
        let columns = OwnColumns::new([&field_names::<Zebra>()[..], &field_names::<Other>()[..]]);
        let own = OwnFigures::of(&Other { apple_count: Some(3), label: None }).in_columns(&columns);
        assert_eq!(serde_json::to_string(&own).unwrap(), r#"{"zebra_mb_s":null,"apple_count":3,"label":null}"#);
        let alone = OwnFigures::of(&Other { apple_count: Some(3), label: None });
        assert_eq!(serde_json::to_string(&alone).unwrap(), r#"{"apple_count":3,"label":null}"#);
    }

    #[test]
    #[should_panic(expected = "in no JSON column")]
    fn a_figure_outside_the_columns_is_a_bug_not_a_lost_field() {
        let columns = OwnColumns::new([&field_names::<Zebra>()[..]]);
        let _ = serde_json::to_string(&OwnFigures::of(&Other::default()).in_columns(&columns));
    }
}
