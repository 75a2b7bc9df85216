fn deposit<'life0, 'async_trait>(
    &'life0 self,
    id: u64,
) -> ::core::pin::Pin<
    Box<
        dyn ::core::future::Future<
            Output = Result<u64, AppError>,
        > + ::core::marker::Send + 'async_trait,
    >,
>
where
    'life0: 'async_trait,
    Self: 'async_trait,
{
    ::std::boxed::Box::pin(async move {
        let __lock = match ::lockcore::__private::lock(
                ::lockcore::__private::manager(&(self.locks)),
                [::std::format!("acct:{}:{}", self.bank, id)],
                ::lockcore::__private::Settings {
                    ttl_ms: ::core::option::Option::None,
                    wait_ms: ::core::option::Option::None,
                    watchdog: ::core::option::Option::None,
                    reentrant: true,
                    on_lost: ::lockcore::__private::OnLost::Abort,
                    key_template: "acct:<self.bank>:<id>",
                },
            )
            .await
        {
            ::core::result::Result::Ok(__lock_value) => __lock_value,
            ::core::result::Result::Err(__lock_error) => {
                return <Result<
                    u64,
                    AppError,
                > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error);
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
                    let __lock_ret: Result<u64, AppError> = loop {};
                    return __lock_ret;
                }
                if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<
                    Result<u64, AppError>,
                > {
                    #[allow(unreachable_code)] return __ret;
                }
                let __self = self;
                #[allow(unused_variables)]
                let id = id;
                let __ret: Result<u64, AppError> = { __self.add(id).await };
                #[allow(unreachable_code)] __ret
            })
            .await;
        match __lock.finish(__lock_outcome).await {
            ::core::result::Result::Ok(__lock_value) => __lock_value,
            ::core::result::Result::Err(__lock_error) => {
                <Result<
                    u64,
                    AppError,
                > as ::lockcore::__private::LockResult>::from_lock_error(__lock_error)
            }
        }
    })
}
