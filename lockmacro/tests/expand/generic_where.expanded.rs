pub async fn run<'a, J: Job + 'a, F>(
    job: &'a J,
    done: impl FnOnce(u64) -> F,
) -> Result<impl Display + 'a, J::Error>
where
    F: Future<Output = ()> + Send,
{
    #![allow(clippy::let_underscore_future)]
    let __lock = match ::my_locks::__private::lock(
            ::my_locks::__private::default_manager(),
            [::std::format!("job:{}", job.id.0)],
            ::my_locks::__private::Settings {
                ttl_ms: ::core::option::Option::None,
                wait_ms: ::core::option::Option::None,
                watchdog: ::core::option::Option::None,
                reentrant: true,
                on_lost: ::my_locks::__private::OnLost::Abort,
                key_template: "job:<job.id.0>",
            },
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                _,
                J::Error,
            > as ::my_locks::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_outcome = __lock
        .run(async move {
            #[allow(
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop
            )]
            if false {
                let __lock_ret: Result<_, J::Error> = loop {};
                return __lock_ret;
            }
            let _ = done(1);
            job.run().await
        })
        .await;
    match __lock.finish(__lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                _,
                J::Error,
            > as ::my_locks::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
