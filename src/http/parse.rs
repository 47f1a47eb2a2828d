//! stub
use super::Request;
use bytes::BytesMut;
#[derive(Debug, PartialEq, Eq)]
pub enum ParseError { HeadTooLarge, TooManyHeaders, BodyTooLarge, Malformed(&'static str) }
pub enum Progress { Complete(Request), NeedMore { send_continue: bool } }
pub struct Parser;
impl Parser {
    pub fn new(_head_bytes_max: usize, _headers_max: usize, _body_bytes_max: usize) -> Self { Parser }
    pub fn parse(&mut self, _buffer: &mut BytesMut) -> Result<Progress, ParseError> { todo!() }
}
