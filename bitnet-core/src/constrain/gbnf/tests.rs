//! GBNF translation: each construct, the errors, and the language llguidance accepts.
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::ApproximateTokEnv;

use super::reader::MAX_NESTING;
use super::*;

/// A matcher for the translation of `gbnf` over a vocabulary of the 256 single bytes
/// (and a few named special tokens, the last one ending the text).
fn matcher(gbnf: &str) -> Matcher {
    let lark = gbnf_to_lark(gbnf).unwrap_or_else(|e| panic!("{e}\n{gbnf}"));
    let mut factory =
        ParserFactory::new_simple(&ApproximateTokEnv::single_byte_env()).expect("byte vocabulary");
    factory.quiet();
    let parser = factory
        .create_parser(TopLevelGrammar::from_lark(lark.clone()))
        .unwrap_or_else(|e| panic!("llguidance refused\n{lark}\n{e}"));
    Matcher::new(Ok(parser))
}

/// Whether the grammar matches all of `text`, fed one byte (one token) at a time.
fn matches(m: &Matcher, text: &str) -> bool {
    let mut m = m.deep_clone();
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    m.try_consume_tokens(&tokens).expect("matcher") == tokens.len()
        && m.is_accepting().expect("matcher")
}

fn check(gbnf: &str, accepted: &[&str], rejected: &[&str]) {
    let m = matcher(gbnf);
    for text in accepted {
        assert!(matches(&m, text), "{text:?} should match\n{gbnf}");
    }
    for text in rejected {
        assert!(!matches(&m, text), "{text:?} should not match\n{gbnf}");
    }
}

fn error(gbnf: &str) -> GbnfError {
    match gbnf_to_lark(gbnf) {
        Ok(lark) => panic!("{gbnf:?} should be refused, gave\n{lark}"),
        Err(e) => e,
    }
}

fn assert_error(gbnf: &str, line: usize, column: usize, words: &str) {
    let e = error(gbnf);
    assert_eq!((e.line, e.column), (line, column), "{e}");
    assert!(e.message.contains(words), "{e}");
}

#[test]
fn each_construct_translates() {
    let lark = |g: &str| gbnf_to_lark(g).unwrap();
    assert_eq!(lark("root ::= \"ab\""), "start: root\nroot: \"a\" \"b\"\n");
    assert_eq!(
        lark("root ::= [a-z_]"),
        "start: root\nroot: /[a-z\\x{5F}]/\n"
    );
    assert_eq!(lark("root ::= [^\"]"), "start: root\nroot: /[^\\x{22}]/\n");
    assert_eq!(lark("root ::= ."), "start: root\nroot: /(?s:.)/\n");
    assert_eq!(
        lark("root ::= | x\nx ::= \"\""),
        "start: root\nroot: \"\" | x\nx: \"\"\n"
    );
    assert_eq!(
        lark("root ::= (\"a\" | [0-9])*"),
        "start: root\nroot: (\"a\" | /[0-9]/)*\n"
    );
    assert_eq!(
        lark("root ::= \"ab\"+ \"c\"?"),
        "start: root\nroot: (\"a\" \"b\")+ \"c\"?\n"
    );
    assert_eq!(
        lark("root ::= \"a\"{2} \"b\"{2,} \"c\"{1,3} \"d\"{,4} \"e\"{0}"),
        "start: root\nroot: \"a\"{2} \"b\"{2,} \"c\"{1,3} \"d\"{0,4} \"\"\n"
    );
    assert_eq!(lark("root ::= \"a\"*?"), "start: root\nroot: (\"a\"*)?\n");
    assert_eq!(
        lark("root ::= <[5]> !<[7]> <|tool|>"),
        "start: root\nroot: <[5]> <[^7]> <|tool|>\n"
    );
    // Escapes, including the ones Lark's strings spell differently.
    assert_eq!(
        lark(r#"root ::= "\n\t\"\\\x7F\u00e9\U0001F600""#),
        "start: root\nroot: \"\\u000a\" \"\\u0009\" \"\\\"\" \"\\\\\" \"\\u007f\" \"é\" \"😀\"\n"
    );
    assert_eq!(
        lark(r"root ::= [\]\-\x2F/]"),
        "start: root\nroot: /[\\x{5D}\\x{2D}\\x{2F}\\x{2F}]/\n"
    );
}

#[test]
fn names_are_made_lark_names_without_collisions() {
    let lark = gbnf_to_lark("root ::= Start start A-b 9x\nStart ::= \"1\"\nstart ::= \"2\"\nA-b ::= \"3\"\n9x ::= \"4\"").unwrap();
    assert_eq!(
        lark,
        "start: root\nroot: start-2 start-3 a-b r9x\nstart-2: \"1\"\nstart-3: \"2\"\na-b: \"3\"\nr9x: \"4\"\n"
    );
    check(
        "root ::= Start start\nStart ::= \"1\"\nstart ::= \"2\"",
        &["12"],
        &["21", "1", "11"],
    );
}

#[test]
fn greedy_lexing_does_not_change_the_language() {
    // As lexemes, `[a-z]*` would swallow the x and `"ab"` the b.
    check(
        "root ::= [a-z]* \"x\"",
        &["x", "abx", "xxx"],
        &["", "ab", "xa"],
    );
    check(
        "root ::= (\"a\" | \"ab\") \"b\"",
        &["ab", "abb"],
        &["a", "b", "abbb"],
    );
    check("root ::= \"a\" | \"ab\"", &["a", "ab"], &["", "b", "aba"]);
    check("root ::= [0-9]+ [0-9]", &["12", "123"], &["1", ""]);
    check(
        "root ::= .* \"end\"",
        &["end", "the end", "endend"],
        &["en", "end "],
    );
}

#[test]
fn classes_repetitions_and_any_match_as_in_gbnf() {
    check("root ::= [^a]", &["b", "\n", "é", "語"], &["a", "", "bb"]);
    check("root ::= [a-cx-z]+", &["abc", "zyx"], &["d", "", "aw"]);
    check("root ::= [z-a] | \"q\"", &["q"], &["z", "a", "m"]);
    check("root ::= []", &[], &["", "a"]);
    check("root ::= [^] [-a] [a-]", &["x-a", "\n--"], &["xb-", "x"]);
    check(r"root ::= [\x00-\x1F\\]", &["\u{1}", "\\"], &[" ", "a"]);
    check(
        "root ::= \"ab\"{2,3}",
        &["abab", "ababab"],
        &["ab", "abababab", "aba"],
    );
    check("root ::= \"a\"{3}", &["aaa"], &["aa", "aaaa"]);
    check("root ::= \"a\"{2,}", &["aa", "aaaaa"], &["a"]);
    check("root ::= \"a\"{,2} \"b\"", &["b", "ab", "aab"], &["aaab"]);
    check(
        "root ::= (\"a\"{2}){2} \"b\"?",
        &["aaaa", "aaaab"],
        &["aaa", "aaaaaa"],
    );
    check("root ::= \"x\" \"y\"{0} \"z\"", &["xz"], &["xyz"]);
    check("root ::= . \".\"", &["..", "\n.", "語."], &[".", "ab"]);
}

#[test]
fn rules_recursion_and_layout() {
    // Left recursion, which llama.cpp refuses, is plain Earley.
    check(
        "root ::= list\nlist ::= list \",\" item | item\nitem ::= [0-9]",
        &["1", "1,2,3"],
        &["", "1,", ",1", "12"],
    );
    // Rules continue over lines inside groups and after `::=` or `|`; comments anywhere.
    check(
        "# numbers\nroot ::=\n  (\n  \"a\" # first\n  | \"b\"\n  )+ |\n  \"c\" # last\n\n",
        &["a", "abba", "c"],
        &["ac", ""],
    );
    check("root ::= \"a\"\r\nroot ::= \"b\"\r\n", &["b"], &["a"]);
}

#[test]
fn tokens_are_matched_by_id() {
    check("root ::= \"a\" <[98]>", &["ab"], &["a", "aa"]);
    check("root ::= !<[98]> \"c\"", &["ac", "cc"], &["bc", "c"]);
}

const JSON: &str = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
        string ":" ws value
("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
        value
("," ws value)*
  )? "]" ws

string ::=
  "\"" (
[^"\\\x7F\x00-\x1F] |
"\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn a_json_grammar() {
    check(
        JSON,
        &[
            "{}",
            r#"{"a": 1}"#,
            r#"{"a": [1, 2.5, -3e4, "x\"y\u00e9", true, null, {"b": false}]}"#,
            "{\n  \"k\": \"語\"}",
        ],
        &[
            "",
            "[]",
            "{",
            r#"{"a" 1}"#,
            r#"{"a": 01}"#,
            r#"{"a": "\x"}"#,
            "{\"a\": \"\u{1}\"}",
        ],
    );
}

#[test]
fn an_arithmetic_grammar() {
    let arithmetic = "root  ::= (expr \"=\" ws term \"\\n\")+\n\
        expr  ::= term ([-+*/] term)*\n\
        term  ::= ident | num | \"(\" ws expr \")\" ws\n\
        ident ::= [a-z] [a-z0-9_]* ws\n\
        num   ::= [0-9]+ ws\n\
        ws    ::= [ \\t\\n]*\n";
    check(
        arithmetic,
        &["1+2= 3\n", "(a_1 *20)/x=y\nb=1\n"],
        &["1+2=3", "=3\n", "1++2=3\n", "A=1\n"],
    );
}

#[test]
fn a_list_grammar() {
    let list = "root ::= item+\n# Excludes various line break characters\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"";
    check(
        list,
        &["- one\n", "- one\n- two words\n"],
        &["", "- one", "-one\n", "- \n", "- a\u{2028}b\n"],
    );
}

#[test]
fn a_japanese_grammar() {
    let japanese = "root ::= jp-char+ ([ \\t\\n] jp-char+)*\n\
        jp-char ::= hiragana | katakana | punctuation | cjk\n\
        hiragana ::= [ぁ-ゟ]\n\
        katakana ::= [ァ-ヿ]\n\
        punctuation ::= [、-〾]\n\
        cjk ::= [一-鿿]\n";
    check(
        japanese,
        &["こんにちは", "日本語 カタカナ、ひらがな", "東京\n大阪"],
        &["", "abc", "日本語 ", "日本a"],
    );
    check(
        "root ::= \"寿司\"{2} [^寿]",
        &["寿司寿司x", "寿司寿司語"],
        &["寿司寿司寿", "寿司"],
    );
}

#[test]
fn errors_say_where() {
    assert_error("root ::= foo", 1, 10, "rule 'foo' is not defined");
    assert_error("a ::= \"x\"", 1, 1, "no 'root' rule");
    assert_error("root ::= \"a\nb", 1, 10, "string is never closed");
    assert_error("root ::= [a-z\n", 1, 10, "class is never closed");
    assert_error("root ::= \"a\\qb\"", 1, 12, "unknown escape '\\q'");
    assert_error("root ::= \"\\x4\"", 1, 11, "2 hexadecimal digits");
    assert_error("root ::= \"\\UFFFFFFFF\"", 1, 11, "not a Unicode character");
    assert_error("root ::= \"a\"\n  \"b\"", 2, 3, "expected a rule name");
    assert_error("root ::= (\"a\"\n", 1, 10, "'(' is never closed");
    assert_error("root ::= (\"a\" ]", 1, 15, "expected ')'");
    assert_error("root ::= \"a\" )", 1, 14, "expected the end of the line");
    assert_error("root ::= * \"a\"", 1, 10, "nothing before it to repeat");
    assert_error("root :: \"a\"", 1, 6, "expected '::='");
    assert_error("root ::= \"a\"{3,2}", 1, 13, "below its minimum");
    assert_error("root ::= \"a\"{2001}", 1, 13, "over 2000");
    assert_error("root ::= \"a\"{}", 1, 14, "expected a number");
    assert_error("root ::= \"a\"{ , }", 1, 13, "needs a count");
    assert_error("root ::= ((\"a\"{0,50}){0,50})", 1, 22, "expands past 2000");
    assert_error("root ::= !<foo>", 1, 10, "only supported by id");
    assert_error("root ::= <[12x]>", 1, 10, "token id");
    assert_error("root ::= <[12]", 1, 10, "never closed");
    assert_error(
        "root ::= \"x\"\nroot ::= é",
        2,
        10,
        "expected the end of the line",
    );
}

#[test]
fn hostile_input_is_refused_not_crashed() {
    let deep = format!(
        "root ::= {}\"a\"{}",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(error(&deep).message.contains("nested"));
    let stacked = format!("root ::= \"a\"{}", "?".repeat(100_000));
    assert!(error(&stacked).message.contains("nested"));
    // Nesting under the bound still compiles: llguidance's own limit on Lark nesting is
    // kept by moving deep groups into rules of their own.
    let n = MAX_NESTING - 2;
    check(
        &format!("root ::= {}\"a\"{}", "(".repeat(n / 2), ")+".repeat(n / 2)),
        &["a", "aaa"],
        &["", "b"],
    );
    check(
        &format!("root ::= \"a\"{}", "?".repeat(n)),
        &["", "a"],
        &["aa"],
    );
    for junk in [
        "",
        "::=",
        "root",
        "root ::=",
        "\\",
        "root ::= \"\\",
        "root ::= [\\",
        "root ::= <",
        "root ::= \"a\"{",
        "root ::= \"a\"{99999999999999999999999}",
        "\u{0}",
        "root ::= [a-",
    ] {
        let _ = gbnf_to_lark(junk);
    }
}

#[test]
fn long_chains_of_rules_are_refused_before_llguidance_recurses_through_them() {
    let chain = |n: usize| {
        let mut g = String::from("root ::= a0\n");
        for i in 0..n {
            g.push_str(&format!("a{i} ::= \"x\" a{} | \"z\"\n", i + 1));
        }
        g + &format!("a{n} ::= \"y\"\n")
    };
    check(
        &chain(200),
        &["xxz", "z", &format!("{}y", "x".repeat(200))],
        &["xy", "xx"],
    );
    // Groups count towards the depth, as llguidance recurses through them too.
    let mut grouped = String::from("root ::= a0\n");
    for i in 0..22 {
        let (open, close) = ("(".repeat(10), ")".repeat(10));
        grouped.push_str(&format!("a{i} ::= {open}\"x\" a{}{close} | \"z\"\n", i + 1));
    }
    check(
        &(grouped.clone() + "a22 ::= \"y\""),
        &["xz", &format!("{}y", "x".repeat(22))],
        &["x"],
    );
    let deeper = format!(
        "a22 ::= {}\"y\" a23{}\na23 ::= \"w\"",
        "(".repeat(13),
        ")".repeat(13)
    );
    let e = error(&(grouped + &deeper));
    assert!(e.message.contains("nested too deep"), "{e}");
    let e = error(&chain(100_000));
    assert!(e.message.contains("nested too deep"), "{e}");
}
