//! The messages of a Get Messages or Peek Messages answer, read from its XML with quick-xml's
//! borrowed reader. Reading an answer costs quick-xml's stack of open element names: a few
//! small allocations per answer, however many messages it lists.

/// Longest message ID kept from a Get answer (Azure and azq send 36-character GUIDs).
pub const MESSAGE_ID_BYTES_MAX: usize = 64;
/// Longest pop receipt kept from a Get or Update answer.
pub const POP_RECEIPT_BYTES_MAX: usize = 128;

/// One message of a Get Messages or Peek Messages answer; fields borrow the body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListedMessage<'a> {
    pub message_id: &'a [u8],
    /// Empty for Peek, which issues no receipt.
    pub pop_receipt: &'a [u8],
    pub message_text: &'a [u8],
    /// Deliveries so far, this one included (0 when absent, as in a Peek of a new message).
    pub dequeue_count: u32,
}

/// The `<QueueMessage>` elements of a `<QueueMessagesList>` body, read with quick-xml's borrowed
/// reader: every field is a slice of the body. Values are not XML-unescaped: IDs and receipts
/// are GUIDs and base64, and only the leading digits of the text are read. The walk stops at
/// the first malformed or truncated element, which is not a message.
pub struct ListedMessages<'a> {
    reader: quick_xml::Reader<&'a [u8]>,
    /// Set once the body is exhausted or malformed.
    finished: bool,
}

/// Iterates the messages of a Get Messages or Peek Messages answer.
pub fn listed_messages(body: &[u8]) -> ListedMessages<'_> {
    ListedMessages {
        reader: quick_xml::Reader::from_reader(body),
        finished: false,
    }
}

/// The child of `<QueueMessage>` whose text is being read.
#[derive(Clone, Copy)]
enum MessageField {
    MessageId,
    PopReceipt,
    MessageText,
    DequeueCount,
}

impl<'a> ListedMessages<'a> {
    /// The next event; `None` (and finished) at the end of the body or on malformed XML.
    fn next_event(&mut self) -> Option<quick_xml::events::Event<'a>> {
        match self.reader.read_event() {
            Ok(quick_xml::events::Event::Eof) | Err(_) => {
                self.finished = true;
                None
            }
            Ok(event) => Some(event),
        }
    }
}

impl<'a> Iterator for ListedMessages<'a> {
    type Item = ListedMessage<'a>;

    fn next(&mut self) -> Option<ListedMessage<'a>> {
        use quick_xml::events::Event;
        use std::borrow::Cow;

        if self.finished {
            return None;
        }
        loop {
            match self.next_event()? {
                Event::Start(start) if start.name().as_ref() == b"QueueMessage" => break,
                _ => {}
            }
        }
        let mut message = ListedMessage::default();
        let mut field = None;
        loop {
            let text = match self.next_event()? {
                Event::Start(start) => {
                    field = match start.name().as_ref() {
                        b"MessageId" => Some(MessageField::MessageId),
                        b"PopReceipt" => Some(MessageField::PopReceipt),
                        b"MessageText" => Some(MessageField::MessageText),
                        b"DequeueCount" => Some(MessageField::DequeueCount),
                        _ => None,
                    };
                    continue;
                }
                Event::End(end) if end.name().as_ref() == b"QueueMessage" => return Some(message),
                Event::End(_) => {
                    field = None;
                    continue;
                }
                Event::Text(text) => text.into_inner(),
                Event::CData(text) => text.into_inner(),
                _ => continue,
            };
            // A reader over a slice lends slices of it.
            let Cow::Borrowed(text) = text else {
                continue;
            };
            match field {
                Some(MessageField::MessageId) => message.message_id = text,
                Some(MessageField::PopReceipt) => message.pop_receipt = text,
                Some(MessageField::MessageText) => message.message_text = text,
                Some(MessageField::DequeueCount) => {
                    message.dequeue_count = std::str::from_utf8(text)
                        .ok()
                        .and_then(|digits| digits.trim().parse().ok())
                        .unwrap_or(0);
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_answers() {
        let azq = b"<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList><QueueMessage>\
            <MessageId>id-1</MessageId><InsertionTime>t</InsertionTime><PopReceipt>AgAA+/w=</PopReceipt>\
            <DequeueCount>1</DequeueCount><MessageText>1795305600123456xx</MessageText></QueueMessage>\
            <QueueMessage><MessageId>id-2</MessageId><PopReceipt>r2</PopReceipt><MessageText>hello</MessageText>\
            </QueueMessage></QueueMessagesList>";
        let messages: Vec<_> = listed_messages(azq).collect();
        assert_eq!(
            messages,
            vec![
                ListedMessage {
                    message_id: b"id-1",
                    pop_receipt: b"AgAA+/w=",
                    message_text: b"1795305600123456xx",
                    dequeue_count: 1,
                },
                ListedMessage {
                    message_id: b"id-2",
                    pop_receipt: b"r2",
                    message_text: b"hello",
                    dequeue_count: 0,
                },
            ]
        );
        assert_eq!(listed_messages(b"<QueueMessagesList />").count(), 0);
        assert_eq!(listed_messages(b"<QueueMessagesList/>").count(), 0);
        // A truncated element is not a message.
        assert_eq!(listed_messages(b"<QueueMessage><MessageId>x").count(), 0);
        // Neither is anything after malformed XML.
        let broken = b"<QueueMessagesList><QueueMessage><MessageId>a</MessageId></QueueMessage>\
            <QueueMessage><MessageId>b</Wrong></QueueMessage>\
            <QueueMessage><MessageId>c</MessageId></QueueMessage></QueueMessagesList>";
        let ids: Vec<&[u8]> = listed_messages(broken).map(|m| m.message_id).collect();
        assert_eq!(ids, vec![&b"a"[..]]);
        // Values are the raw bytes between the tags: entities stay escaped, an empty element
        // is an empty value, and a message without a receipt (Peek) has an empty one.
        let peek = b"<QueueMessagesList><QueueMessage><MessageId>x</MessageId>\
            <MessageText>a &amp; b</MessageText></QueueMessage><QueueMessage>\
            <MessageId>y</MessageId><MessageText/></QueueMessage></QueueMessagesList>";
        let messages: Vec<_> = listed_messages(peek).collect();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].message_text, b"a &amp; b");
        assert_eq!(messages[0].pop_receipt, b"");
        assert_eq!(messages[1].message_text, b"");
    }
}
